//! Sentinel for the live tests: a Valkey master, its replica (in sync) and
//! three Sentinels (`valkey-server --sentinel`) that see both and each
//! other, each on free ports, ready when they answer (polled).

use super::{free_port, replace_ports, try_command, valkey_bin, wait_until, Bootstrap, Envoy, EnvoyOptions, Valkey};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::resp::Value;

pub const MASTER_NAME: &str = "mymaster";

/// A valkey-server in Sentinel mode with its own writable config file.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    pub fn start(master_port: u16) -> Sentinel {
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("tollgate-sentinel-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n",
                    dir.display()
                ),
            )
            .unwrap();
            let mut child = Command::new(valkey_bin())
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start valkey-server --sentinel");
            let start = Instant::now();
            loop {
                if matches!(try_command(port, &[b"PING"]), Ok(Value::Simple(s)) if s == b"PONG") {
                    return Sentinel { port, child, dir };
                }
                if !matches!(child.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("valkey-server --sentinel did not start on 5 different ports");
    }

    pub fn ask(&self, args: &[&str]) -> Option<Value> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        try_command(self.port, &args).ok()
    }

    /// The master's port as this Sentinel reports it.
    pub fn master_port(&self) -> Option<u16> {
        let reply = self.ask(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?;
        let items = reply.as_array()?.to_vec();
        std::str::from_utf8(items.get(1)?.as_bytes()?).ok()?.parse().ok()
    }

    pub fn count(&self, what: &str) -> usize {
        self.ask(&["SENTINEL", what, MASTER_NAME]).and_then(|v| v.as_array().map(<[Value]>::len)).unwrap_or(0)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, its replica (in sync) and three Sentinels that see both and
/// each other, so that a failover can be agreed.
pub fn topology() -> (Valkey, Valkey, Vec<Sentinel>) {
    let master = Valkey::start();
    let replica = Valkey::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    wait_until(
        "the replica to sync",
        Duration::from_secs(15),
        || matches!(replica.cmd(&["INFO", "replication"]), Value::Bulk(t) if String::from_utf8_lossy(&t).contains("master_link_status:up")),
    );
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
    wait_until("the Sentinels to see each other and the replica", Duration::from_secs(20), || {
        sentinels.iter().all(|s| s.count("sentinels") == 2 && s.count("replicas") == 1)
    });
    (master, replica, sentinels)
}

/// Envoy with envoy/envoy-sentinel.yaml (`concurrency` workers) and
/// `plugin_config`, its Sentinel ports replaced by those of `sentinels`.
pub fn envoy(sentinels: &[Sentinel], plugin_config: &str, concurrency: u32) -> Envoy {
    let options = EnvoyOptions { plugin_config: plugin_config.to_string(), valkey_port: 0, concurrency };
    let ports: Vec<u16> = sentinels.iter().map(|s| s.port).collect();
    Envoy::try_start_bootstrap_edited(&options, Bootstrap::Sentinel, &move |text| {
        replace_ports(&text, &[(26379, ports[0]), (26380, ports[1]), (26381, ports[2])])
    })
    .unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
}
