//! Two network namespaces made by the test and joined by a veth pair, so
//! that Envoy reaches Valkey over a real (non-loopback) link: TCP there
//! behaves as across a network (no TIME_WAIT reuse as on loopback, and a
//! link that can be cut silently). Everything the test creates is removed
//! when the pair is dropped, even when the test fails; traffic only ever
//! goes between the two namespaces (and each one's own loopback).
//!
//! Needs root (CI runs as root), `ip` (iproute2) and `iptables`.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Two namespaces and the veth pair between them.
pub struct NetPair {
    /// Where Envoy runs (and the test's clients, through [`within`]).
    pub envoy_ns: String,
    /// Where Valkey runs.
    pub valkey_ns: String,
    pub envoy_ip: String,
    pub valkey_ip: String,
    cut: bool,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (iproute2; the test needs root)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl NetPair {
    pub fn create() -> NetPair {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let (e, v) = (format!("tg{tag}e"), format!("tg{tag}v"));
        let subnet = format!("10.{}.{}", 64 + std::process::id() % 128, n % 250);
        let pair = NetPair {
            envoy_ns: e.clone(),
            valkey_ns: v.clone(),
            envoy_ip: format!("{subnet}.1"),
            valkey_ip: format!("{subnet}.2"),
            cut: false,
        };
        ip(&["netns", "add", &e]);
        ip(&["netns", "add", &v]);
        ip(&["link", "add", &e, "type", "veth", "peer", "name", &v]);
        ip(&["link", "set", &e, "netns", &e]);
        ip(&["link", "set", &v, "netns", &v]);
        ip(&["-n", &e, "addr", "add", &format!("{}/30", pair.envoy_ip), "dev", &e]);
        ip(&["-n", &v, "addr", "add", &format!("{}/30", pair.valkey_ip), "dev", &v]);
        for (ns, dev) in [(&e, &e), (&v, &v)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        pair
    }

    /// `program` run inside namespace `ns`.
    pub fn command(&self, ns: &str, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    /// Cuts the link silently: Valkey's namespace drops every packet, so
    /// TCP notices nothing (no reset, no FIN).
    pub fn cut(&mut self) {
        for chain in ["INPUT", "OUTPUT"] {
            self.iptables(&["-I", chain, "-j", "DROP"]);
        }
        self.cut = true;
    }

    /// Restores a cut link.
    pub fn restore(&mut self) {
        if self.cut {
            for chain in ["INPUT", "OUTPUT"] {
                self.iptables(&["-D", chain, "-j", "DROP"]);
            }
            self.cut = false;
        }
    }

    fn iptables(&self, args: &[&str]) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.valkey_ns, "iptables"])
            .args(args)
            .output()
            .expect("run iptables");
        assert!(out.status.success(), "iptables {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    }

    /// Sockets in TIME_WAIT in Envoy's namespace toward Valkey.
    pub fn time_wait_toward_valkey(&self) -> usize {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.envoy_ns, "ss", "-tan", "state", "time-wait", "dst", &self.valkey_ip])
            .stderr(Stdio::null())
            .output()
            .expect("run ss");
        String::from_utf8_lossy(&out.stdout).lines().skip(1).filter(|l| !l.trim().is_empty()).count()
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth, and so the pair
        // (and the iptables rules that lived in it).
        for ns in [&self.envoy_ns, &self.valkey_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `f` on a thread that lives in namespace `ns`: every socket it opens
/// (and every thread it starts) is there.
pub fn within<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("open the namespace");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a valid namespace fd only changes this thread's
            // network namespace.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns into {ns}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}
