//! A Docker engine and Compose projects for tests/live/packaging/compose.rs and
//! tests/live/packaging/compose_cluster.rs.
//!
//! [`Engine::get`] uses the running engine, or starts `dockerd` (as root) when
//! none answers. Test processes share the engine through two file locks in
//! the temp directory: each holds one shared while it works; whoever finds no
//! other holder at its end stops the `dockerd` that a tollgate test started
//! (never one started otherwise, and never while other containers run). A [`Project`] is one
//! `docker compose -p NAME` stack; dropping it runs `down`, also on failure.

use super::{repo_root, scratch_dir, wait_until};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Set to skip the Docker tests on a machine without root (CI never sets it).
pub const SKIP_VAR: &str = "TOLLGATE_SKIP_COMPOSE";

/// Held shared by each test process that uses the engine.
fn users_lock() -> File {
    lock_file("tollgate-dockerd.users")
}

/// Held exclusively while one process checks, starts or stops the engine.
fn start_lock() -> File {
    lock_file("tollgate-dockerd.start")
}

/// flock needs no write access: another user's lock file opens read-only.
fn lock_file(name: &str) -> File {
    let path = std::env::temp_dir().join(name);
    let file = File::options().create(true).append(true).open(&path).or_else(|_| File::open(&path));
    file.unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The pid of the `dockerd` a tollgate test started, while it may run.
fn marker_path() -> PathBuf {
    std::env::temp_dir().join("tollgate-dockerd.pid")
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("run docker")
}

fn engine_answers() -> bool {
    Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]).output().is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// `pid` is a running `dockerd` (not a pid reused by another program).
fn is_dockerd(pid: &str) -> bool {
    alive(pid) && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "dockerd")
}

fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3 is the state; a zombie has exited.
    !stat.is_empty() && stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) != Some("Z")
}

/// The engine, held (shared lock) until dropped.
pub struct Engine {
    users: File,
}

/// The `dockerd` this process started, to reap it once stopped.
static STARTED: Mutex<Option<Child>> = Mutex::new(None);

impl Engine {
    /// The engine, or `None` when [`SKIP_VAR`] is set. Panics with one line
    /// when Docker cannot run here.
    pub fn get() -> Option<Engine> {
        if std::env::var_os(SKIP_VAR).is_some() {
            println!("compose tests skipped: {SKIP_VAR} is set");
            return None;
        }
        if !engine_answers() && !is_root() {
            panic!("compose tests: no Docker engine answers and only root can start dockerd (start Docker, or set {SKIP_VAR}=1 to skip)");
        }
        let start = start_lock();
        start.lock().unwrap();
        let users = users_lock();
        users.lock_shared().unwrap();
        if !engine_answers() {
            start_dockerd();
        }
        start.unlock().unwrap();
        Some(Engine { users })
    }
}

fn start_dockerd() {
    let which = Command::new("sh").args(["-c", "command -v dockerd"]).output();
    if !which.is_ok_and(|o| o.status.success()) {
        panic!("compose tests: no Docker engine answers and dockerd is not installed (make docker-tools installs it; {SKIP_VAR}=1 skips)");
    }
    let log_path = std::env::temp_dir().join("tollgate-dockerd.log");
    let log = File::create(&log_path).unwrap();
    // Its own process group: a Ctrl-C of one test run must not take the
    // engine from under another.
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new("dockerd").stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log),
        0,
    )
    .spawn()
    .expect("start dockerd");
    std::fs::write(marker_path(), child.id().to_string()).unwrap();
    let pid = child.id();
    wait_until("dockerd to answer", Duration::from_secs(60), || {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            panic!("compose tests: dockerd exited ({status}): {}", tail.join(" | "));
        }
        engine_answers()
    });
    *STARTED.lock().unwrap() = Some(child);
    eprintln!("compose tests: started dockerd (pid {pid}, log {})", log_path.display());
}

impl Drop for Engine {
    fn drop(&mut self) {
        let start = start_lock();
        let _ = start.lock();
        let _ = self.users.unlock();
        // Another test process still holds it shared: the engine is in use.
        let users = users_lock();
        if matches!(users.try_lock(), Ok(())) {
            stop_dockerd_if_ours_and_idle();
        }
        let _ = start.unlock();
    }
}

fn stop_dockerd_if_ours_and_idle() {
    let Ok(pid) = std::fs::read_to_string(marker_path()) else { return };
    let pid = pid.trim();
    let running = docker(&["ps", "-q"]);
    if !running.status.success() || !running.stdout.trim_ascii().is_empty() {
        // Other containers run on it (not a test's: those are down by now).
        if is_dockerd(pid) {
            return;
        }
    } else if is_dockerd(pid) {
        let _ = Command::new("kill").arg(pid).status();
        let start = std::time::Instant::now();
        while alive(pid) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if let Some(mut child) = STARTED.lock().unwrap().take() {
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(marker_path());
}

/// Builds the stand-in images (scripts/compose-images.sh) unless the tags
/// exist; a local image is reused, nothing is pulled.
pub fn stand_in_images() {
    let out = Command::new(repo_root().join("scripts/compose-images.sh")).output().expect("run compose-images.sh");
    assert!(out.status.success(), "compose-images.sh: {}", String::from_utf8_lossy(&out.stderr));
}

/// The engine (see [`Engine::get`]) with the images, built once per test
/// process; the module must be built.
pub fn engine_and_images() -> Option<Engine> {
    static IMAGES: std::sync::Once = std::sync::Once::new();
    let engine = Engine::get()?;
    let wasm = repo_root().join("target/wasm32-wasip1/release/tollgate.wasm");
    assert!(wasm.exists(), "{}: missing (make build)", wasm.display());
    IMAGES.call_once(stand_in_images);
    Some(engine)
}

pub fn compose_bin() -> PathBuf {
    let bin = std::env::var_os("TOLLGATE_COMPOSE")
        .map_or_else(|| repo_root().join(".tools/bin/docker-compose"), PathBuf::from);
    assert!(bin.exists(), "{}: missing; make docker-tools installs Compose v2", bin.display());
    bin
}

/// One `docker compose` project of envoy/docker-compose.yml (plus an
/// override file of the test's own), removed with everything it made when
/// dropped.
pub struct Project {
    pub name: String,
    overrides: Vec<PathBuf>,
    env: Vec<(String, String)>,
    pub dir: PathBuf,
    down: bool,
}

impl Project {
    /// `override_yaml` is a compose file merged over envoy/docker-compose.yml.
    pub fn new(suffix: &str, override_yaml: &str, env: &[(&str, &str)]) -> Project {
        remove_stale_projects();
        let dir = scratch_dir(&format!("compose-{suffix}"));
        let mut project = Project {
            name: format!("tollgate-test-{}-{suffix}", std::process::id()),
            overrides: Vec::new(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            dir,
            down: false,
        };
        project.add_override(override_yaml);
        project
    }

    /// One more compose file, merged over the others from the next command on.
    pub fn add_override(&mut self, yaml: &str) {
        let file = self.dir.join(format!("override-{}.yml", self.overrides.len()));
        std::fs::write(&file, yaml).unwrap();
        self.overrides.push(file);
    }

    /// `docker compose` with this project's name, files, env and every profile.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(compose_bin());
        cmd.arg("-p").arg(&self.name).arg("-f").arg(repo_root().join("envoy/docker-compose.yml"));
        for file in &self.overrides {
            cmd.arg("-f").arg(file);
        }
        cmd.args(["--profile", "sentinel", "--profile", "registry", "--profile", "cluster"]).args(args);
        for var in ["COMPOSE_FILE", "COMPOSE_PROFILES", "COMPOSE_PROJECT_NAME"] {
            cmd.env_remove(var);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).output().expect("run docker compose")
    }

    /// [`Project::run`], which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "docker compose {args:?} failed:\n{text}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The host port (on 127.0.0.1) that `service`'s `port` is published on.
    pub fn port(&self, service: &str, port: u16) -> u16 {
        let out = self.ok(&["port", service, &port.to_string()]);
        let host = out.trim().rsplit_once(':').map(|(_, p)| p.to_string()).unwrap_or_default();
        host.parse().unwrap_or_else(|_| panic!("{service}:{port} is not published: {out:?}"))
    }

    /// The container id of `service`.
    pub fn container(&self, service: &str) -> String {
        let id = self.ok(&["ps", "-a", "-q", service]).trim().to_string();
        assert!(!id.is_empty(), "no container for {service}");
        id
    }

    pub fn logs(&self, service: &str) -> String {
        let out = self.run(&["logs", "--no-color", service]);
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    /// `down`, then what is left with the project's label: nothing, or a list.
    pub fn down(&mut self) -> Vec<String> {
        self.down = true;
        let out = self.run(&["down", "--volumes", "--remove-orphans", "--timeout", "1"]);
        let mut left = leftovers(&self.name);
        if !out.status.success() {
            left.push(format!("down failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        left
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if !self.down {
            let left = self.down();
            if !left.is_empty() {
                eprintln!("compose project {}: left behind {left:?}", self.name);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Containers, networks and volumes labelled with compose project `name`.
pub fn leftovers(name: &str) -> Vec<String> {
    let filter = format!("label=com.docker.compose.project={name}");
    let mut left = Vec::new();
    for kind in [vec!["ps", "-a", "-q"], vec!["network", "ls", "-q"], vec!["volume", "ls", "-q"]] {
        let out = docker(&[kind.clone(), vec!["--filter", &filter]].concat());
        assert!(out.status.success(), "docker {kind:?}: {}", String::from_utf8_lossy(&out.stderr));
        let ids = String::from_utf8_lossy(&out.stdout);
        left.extend(ids.split_whitespace().map(|id| format!("{} {id}", kind[0])));
    }
    left
}

/// Projects of test processes that no longer run (killed before their
/// `down`): their containers, networks and volumes (the registry's data
/// among them), removed by name.
fn remove_stale_projects() {
    let label = "{{.Label \"com.docker.compose.project\"}}";
    let mut names = String::new();
    for kind in [["ps", "-a"], ["network", "ls"], ["volume", "ls"]] {
        names.push_str(&String::from_utf8_lossy(&docker(&[kind[0], kind[1], "--format", label]).stdout));
    }
    let mut stale: Vec<&str> = names
        .lines()
        .filter(|n| n.strip_prefix("tollgate-test-").and_then(|r| r.split('-').next()).is_some_and(|pid| !alive(pid)))
        .collect();
    stale.sort_unstable();
    stale.dedup();
    for name in stale {
        let down = ["-p", name, "down", "--volumes", "--timeout", "1"];
        let _ = Command::new(compose_bin()).args(down).current_dir(std::env::temp_dir()).output();
        // What `down` without the compose file may leave: volumes, and
        // networks without containers.
        let filter = format!("label=com.docker.compose.project={name}");
        for kind in ["volume", "network"] {
            let ids = docker(&[kind, "ls", "-q", "--filter", &filter]).stdout;
            for id in String::from_utf8_lossy(&ids).split_whitespace() {
                let _ = docker(&[kind, "rm", id]);
            }
        }
    }
}

/// The address of `container` on its (one) compose network, as Docker
/// reports it: to compare with what a Sentinel reports, never to connect to.
pub fn container_ip(container: &str) -> String {
    let out = docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container]);
    assert!(out.status.success(), "docker inspect {container}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
