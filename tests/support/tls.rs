//! TLS to the store: a self-signed CA made with `openssl`, Debian's
//! `redis-server` (Redis 7, built with TLS) listening for TLS, and the edit
//! that gives the rendered Envoy configuration's `valkey` cluster a TLS
//! `transport_socket` (the YAML is documented in docs/reliability.md).

use super::{free_port, scratch_dir, try_command};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::resp::Value;

/// `redis-server` from `TOLLGATE_REDIS`, else Debian's `/usr/bin/redis-server`
/// (installed by `scripts/install-redis.sh`).
pub fn redis_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_REDIS").map_or_else(|| PathBuf::from("/usr/bin/redis-server"), PathBuf::from)
}

/// A CA, a server certificate for `localhost`/127.0.0.1 and a client
/// certificate, all signed by the CA, in a scratch directory.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    pub fn generate(name: &str) -> Certs {
        let dir = scratch_dir(name);
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(&dir).output().expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=tollgate-test-ca",
        ]);
        std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for who in ["server", "client"] {
            let (key, csr, crt, ext) =
                (format!("{who}.key"), format!("{who}.csr"), format!("{who}.crt"), format!("{who}.ext"));
            let subject = format!("/CN=tollgate-test-{who}");
            openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Certs { dir }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-server` with a TLS port (what Envoy uses, client certificates
/// required) and a plain port on loopback (what the test reads state through).
pub struct Redis {
    pub tls_port: u16,
    pub plain_port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Redis {
    pub fn start_tls(certs: &Certs) -> Redis {
        for _ in 0..5 {
            let (tls_port, plain_port, dir) = (free_port(), free_port(), scratch_dir("redis"));
            let path = |f: &str| certs.path(f).display().to_string();
            let mut child = Command::new(redis_bin())
                .args(["--port", &plain_port.to_string(), "--tls-port", &tls_port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--tls-cert-file", &path("server.crt"), "--tls-key-file", &path("server.key")])
                .args(["--tls-ca-cert-file", &path("ca.crt"), "--tls-auth-clients", "yes"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {} (run `make tools`): {e}", redis_bin().display()));
            let start = Instant::now();
            loop {
                if matches!(try_command(plain_port, &[b"PING"]), Ok(Value::Simple(s)) if s == b"PONG") {
                    return Redis { tls_port, plain_port, child: Some(child), dir };
                }
                if !matches!(child.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server with TLS did not start on 5 different ports");
    }

    pub fn cmd(&self, args: &[&str]) -> Value {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        try_command(self.plain_port, &args).unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `transport_socket` of the `valkey` cluster: TLS, verifying the
/// server's certificate against `ca` and its name `localhost`, presenting a
/// client certificate.
pub fn tls_transport_socket(ca: &Path, client_crt: &Path, client_key: &Path) -> String {
    format!(
        r#"transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
    sni: localhost
    common_tls_context:
      tls_certificates:
        - certificate_chain: {{ filename: {} }}
          private_key: {{ filename: {} }}
      validation_context:
        trusted_ca: {{ filename: {} }}
        match_typed_subject_alt_names:
          - san_type: DNS
            matcher: {{ exact: localhost }}
"#,
        client_crt.display(),
        client_key.display(),
        ca.display()
    )
}

/// Inserts `socket` (YAML at column 0) into the rendered `valkey` cluster.
pub fn with_valkey_transport_socket(config: String, socket: &str) -> String {
    let mut out = String::with_capacity(config.len() + socket.len() * 2);
    let mut in_valkey = false;
    for line in config.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim() == "- name: valkey" {
            in_valkey = true;
        } else if in_valkey && line.trim_start().starts_with("connect_timeout:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            for socket_line in socket.lines() {
                out.push_str(indent);
                out.push_str(socket_line);
                out.push('\n');
            }
            in_valkey = false;
        }
    }
    assert!(out.contains("envoy.transport_sockets.tls"), "the valkey cluster was not found");
    out
}
