//! A real Envoy running the repository's configs from `envoy/`, with only
//! ports, module path, plugin configuration and LDS directory substituted.

use super::http::{admin_get, http_to, Response};
use super::{envoy_bin, free_port, repo_root, scratch_dir, wasm_path};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options for one Envoy process running `envoy/envoy.yaml` with substitutions.
pub struct EnvoyOptions {
    /// The plugin configuration JSON (replaces the demo's).
    pub plugin_config: String,
    pub valkey_port: u16,
    pub concurrency: u32,
}

/// Which bootstrap of `envoy/` an [`Envoy`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// `envoy/envoy.yaml`: everything static.
    Static,
    /// `envoy/envoy-dynamic.yaml`: the demo listener from file-based LDS.
    Lds,
    /// `envoy/envoy-ecds.yaml`: the tollgate filter from file-based ECDS.
    Ecds,
    /// `envoy/envoy-sentinel.yaml`: the master from Sentinel discovery.
    Sentinel,
    /// `envoy/envoy-cluster.yaml`: a Valkey Cluster, its slot map from seeds.
    Cluster,
}

/// A real Envoy running the repository's `envoy/envoy.yaml`, with only its
/// ports, module path and plugin configuration replaced.
pub struct Envoy {
    pub port: u16,
    pub admin_port: u16,
    ports: Ports,
    child: Option<Child>,
    dir: PathBuf,
    pub log: PathBuf,
    valkey_port: u16,
    module: PathBuf,
    ipv6: bool,
    /// The network namespace it runs in (see [`super::netns`]), if not ours.
    netns: Option<String>,
}

/// Test-only changes to the rendered configuration, beyond the substitutions.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// YAML list items (`- name: ...`, written at column 0) inserted into the
    /// demo listener's HTTP filter chain before tollgate, e.g. `jwt_authn`.
    pub http_filters_before: Option<String>,
    /// The demo listener listens on `[::1]` instead of `127.0.0.1`.
    pub ipv6: bool,
}

impl Extras {
    fn apply(&self, text: String, listener_port: u16) -> String {
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            if let (Some(filters), true) = (&self.http_filters_before, line.trim() == "- name: tollgate") {
                let indent = &line[..line.len() - line.trim_start().len()];
                for extra in filters.lines() {
                    out.push_str(indent);
                    out.push_str(extra);
                    out.push('\n');
                }
            }
            let own = format!("address: 127.0.0.1, port_value: {listener_port} ");
            if self.ipv6 && line.contains(&own) {
                out.push_str(&line.replace(&own, &format!("address: \"::1\", port_value: {listener_port} ")));
            } else {
                out.push_str(line);
            }
            out.push('\n');
        }
        out
    }
}

/// The ports one Envoy listens on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub listener: u16,
    pub upstream: u16,
    pub admin: u16,
}

/// A config file of `envoy/` with the given ports, module, plugin
/// configuration and LDS directory substituted; nothing else changes.
pub fn render_envoy_config(text: &str, options: &EnvoyOptions, ports: Ports, lds_dir: &Path) -> String {
    render_with_module(text, options, ports, lds_dir, &wasm_path())
}

/// [`render_envoy_config`] with the module at `module` instead of the built one.
pub fn render_with_module(text: &str, options: &EnvoyOptions, ports: Ports, lds_dir: &Path, module: &Path) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let port_map =
            [(10000, ports.listener), (10001, ports.upstream), (9901, ports.admin), (6379, options.valkey_port)];
        let replaced = super::replace_ports(line, &port_map)
            .replace("filename: target/wasm32-wasip1/release/tollgate.wasm", &format!("filename: {}", module.display()))
            .replace("envoy/dynamic", &lds_dir.display().to_string());
        out.push_str(&replaced);
        out.push('\n');
        if line.trim_end().ends_with("value: |") {
            // Replace the demo's plugin configuration block.
            let indent = line.len() - line.trim_start().len() + 2;
            while lines.peek().is_some_and(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent) {
                lines.next();
            }
            for json_line in options.plugin_config.lines() {
                out.push_str(&" ".repeat(indent));
                out.push_str(json_line);
                out.push('\n');
            }
        }
    }
    out
}

/// `--log-level info`, or what TOLLGATE_ENVOY_LOG_LEVEL asks for.
fn log_level_args() -> Vec<String> {
    match std::env::var("TOLLGATE_ENVOY_LOG_LEVEL") {
        Ok(level) if level.contains(':') => vec!["--component-log-level".into(), level],
        Ok(level) => vec!["--log-level".into(), level],
        Err(_) => vec!["--log-level".into(), "info".into()],
    }
}

fn read_envoy_file(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("envoy").join(name)).unwrap()
}

impl Envoy {
    pub fn start(options: &EnvoyOptions) -> Self {
        Self::try_start(options).unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    /// Starts Envoy with `envoy/envoy.yaml`; `Err(log)` if it exits or never becomes ready.
    pub fn try_start(options: &EnvoyOptions) -> Result<Self, String> {
        Self::launch_retrying(options, Bootstrap::Static, &wasm_path(), &Extras::default())
    }

    /// Starts Envoy with `envoy/envoy.yaml` changed by `extras`.
    pub fn start_extras(options: &EnvoyOptions, extras: &Extras) -> Self {
        Self::launch_retrying(options, Bootstrap::Static, &wasm_path(), extras)
            .unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    /// Starts Envoy with `envoy/envoy.yaml`, rendered, then changed by `edit`
    /// (e.g. a TLS `transport_socket` on the `valkey` cluster, or raised
    /// header limits); `Err(log)` if it exits or never becomes ready.
    pub fn try_start_edited(options: &EnvoyOptions, edit: &dyn Fn(String) -> String) -> Result<Self, String> {
        Self::retrying(options, Bootstrap::Static, &wasm_path(), &Extras::default(), edit)
    }

    /// Starts Envoy with `bootstrap`, rendered, then changed by `edit` (e.g.
    /// the Sentinels' ports); `Err(log)` if it exits or never becomes ready.
    pub fn try_start_bootstrap_edited(
        options: &EnvoyOptions,
        bootstrap: Bootstrap,
        edit: &dyn Fn(String) -> String,
    ) -> Result<Self, String> {
        Self::retrying(options, bootstrap, &wasm_path(), &Extras::default(), edit)
    }

    /// Starts Envoy with the given bootstrap, loading the module at `module`
    /// (for example one pulled from a registry) instead of the built one.
    pub fn start_with(options: &EnvoyOptions, bootstrap: Bootstrap, module: &Path) -> Self {
        Self::launch_retrying(options, bootstrap, module, &Extras::default())
            .unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    /// Another process may take a chosen port first: retry on fresh ports.
    fn launch_retrying(
        options: &EnvoyOptions,
        bootstrap: Bootstrap,
        module: &Path,
        extras: &Extras,
    ) -> Result<Self, String> {
        Self::retrying(options, bootstrap, module, extras, &|text| text)
    }

    fn retrying(
        options: &EnvoyOptions,
        bootstrap: Bootstrap,
        module: &Path,
        extras: &Extras,
        edit: &dyn Fn(String) -> String,
    ) -> Result<Self, String> {
        Self::retrying_in(options, bootstrap, module, extras, edit, None)
    }

    fn retrying_in(
        options: &EnvoyOptions,
        bootstrap: Bootstrap,
        module: &Path,
        extras: &Extras,
        edit: &dyn Fn(String) -> String,
        netns: Option<&str>,
    ) -> Result<Self, String> {
        let mut result = Self::launch(options, bootstrap, module, extras, edit, netns);
        for _ in 0..4 {
            match &result {
                Err(log) if log.contains("Address already in use") => {
                    result = Self::launch(options, bootstrap, module, extras, edit, netns)
                }
                _ => break,
            }
        }
        result
    }

    /// Starts Envoy with `envoy/envoy.yaml`, rendered and changed by `edit`,
    /// inside network namespace `netns`; every request and stat of the
    /// returned Envoy is made from inside it too.
    pub fn start_in(options: &EnvoyOptions, netns: &str, edit: &dyn Fn(String) -> String) -> Self {
        Self::retrying_in(options, Bootstrap::Static, &wasm_path(), &Extras::default(), edit, Some(netns))
            .unwrap_or_else(|log| panic!("envoy did not become ready in {netns}:\n{log}"))
    }

    /// Runs `f` where this Envoy's sockets are (its namespace, or ours).
    pub fn net<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match &self.netns {
            Some(ns) => super::netns::within(ns, f),
            None => f(),
        }
    }

    /// Starts Envoy with `envoy/envoy-dynamic.yaml`: the demo listener comes
    /// from file-based LDS, so [`Envoy::reload`] can reconfigure it live.
    pub fn start_dynamic(options: &EnvoyOptions) -> Self {
        Self::launch_retrying(options, Bootstrap::Lds, &wasm_path(), &Extras::default())
            .unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    fn launch(
        options: &EnvoyOptions,
        bootstrap: Bootstrap,
        module: &Path,
        extras: &Extras,
        edit: &dyn Fn(String) -> String,
        netns: Option<&str>,
    ) -> Result<Self, String> {
        let ports = Ports { listener: free_port(), upstream: free_port(), admin: free_port() };
        let dir = scratch_dir("envoy");
        let lds_dir = dir.join("lds");
        std::fs::create_dir_all(&lds_dir).unwrap();
        let file = match bootstrap {
            Bootstrap::Static => "envoy.yaml",
            Bootstrap::Lds => "envoy-dynamic.yaml",
            Bootstrap::Ecds => "envoy-ecds.yaml",
            Bootstrap::Sentinel => "envoy-sentinel.yaml",
            Bootstrap::Cluster => "envoy-cluster.yaml",
        };
        let config = dir.join("envoy.yaml");
        let text = render_with_module(&read_envoy_file(file), options, ports, &lds_dir, module);
        std::fs::write(&config, edit(extras.apply(text, ports.listener))).unwrap();
        let log = dir.join("envoy.log");
        let mut envoy = Envoy {
            port: ports.listener,
            admin_port: ports.admin,
            ports,
            child: None,
            dir,
            log,
            valkey_port: options.valkey_port,
            module: module.to_path_buf(),
            ipv6: extras.ipv6,
            netns: netns.map(str::to_owned),
        };
        match bootstrap {
            Bootstrap::Static | Bootstrap::Sentinel | Bootstrap::Cluster => {}
            Bootstrap::Lds => envoy.reload(&options.plugin_config),
            Bootstrap::Ecds => envoy.write_dynamic("tollgate-filter.yaml", &options.plugin_config),
        }
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(envoy_bin());
                c
            }
            None => Command::new(envoy_bin()),
        };
        let child = command
            .arg("-c")
            .arg(&config)
            .args(["--concurrency", &options.concurrency.to_string(), "--use-dynamic-base-id"])
            // A listener replaced by LDS drains for 2 s, not Envoy's default
            // 600 s: its filter chains (and the plugin configuration's store
            // streams) go once it has drained (tests/load/reload.rs).
            .args(["--drain-time-s", "2"])
            // TOLLGATE_ENVOY_LOG_LEVEL=debug (or a component list such as
            // `wasm:debug,grpc:debug`) to debug a test; its log is kept when it fails.
            .args(log_level_args())
            .arg("--log-path")
            .arg(&envoy.log)
            .current_dir(repo_root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start envoy (run `make tools`)");
        envoy.child = Some(child);
        let start = Instant::now();
        loop {
            if !envoy.is_running() {
                return Err(envoy.startup_report("exited"));
            }
            let (admin, host, port) = (envoy.admin_port, envoy.host(), envoy.port);
            let ready = envoy.net(|| {
                admin_get(admin, "/ready").is_some_and(|r| r.status == 200) && TcpStream::connect((host, port)).is_ok()
            });
            if ready {
                return Ok(envoy);
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(envoy.startup_report("never became ready in 30 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rewrites the LDS file with a new plugin configuration (write, then
    /// rename over the watched file, as Envoy's file-based LDS expects).
    pub fn reload(&self, plugin_config: &str) {
        self.write_dynamic("listeners.yaml", plugin_config);
    }

    /// Renders `envoy/dynamic/<name>` with `plugin_config` into the watched
    /// directory (write, then rename over the file).
    pub fn write_dynamic(&self, name: &str, plugin_config: &str) {
        let options =
            EnvoyOptions { plugin_config: plugin_config.to_string(), valkey_port: self.valkey_port, concurrency: 1 };
        let lds_dir = self.dir.join("lds");
        let source = read_envoy_file(&format!("dynamic/{name}"));
        let text = render_with_module(&source, &options, self.ports, &lds_dir, &self.module);
        let tmp = self.dir.join(format!("{name}.new"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, lds_dir.join(name)).unwrap();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Why a start failed, reason first: the log's warning, error and
    /// critical lines, then the whole log without the list of statically
    /// linked extensions (long enough to push the reason out of a CI excerpt).
    fn startup_report(&self, what: &str) -> String {
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("server.cc:467]")).collect();
        let is_problem = |l: &&&str| ["][warning][", "][error][", "][critical]["].iter().any(|m| l.contains(m));
        let problems: Vec<&str> = lines.iter().filter(is_problem).copied().collect();
        format!("envoy {what}; its problems:\n{}\n--- its log ---\n{}", problems.join("\n"), lines.join("\n"))
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        let (host, port) = (self.host(), self.port);
        self.net(|| http_to(host, port, method, path, headers)).unwrap()
    }

    fn host(&self) -> &'static str {
        if self.ipv6 {
            "::1"
        } else {
            "127.0.0.1"
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The plugin configuration JSON embedded in `envoy/envoy.yaml`.
pub fn demo_plugin_config() -> String {
    let text = std::fs::read_to_string(repo_root().join("envoy/envoy.yaml")).unwrap();
    let mut lines = text.lines().skip_while(|l| !l.trim_end().ends_with("value: |"));
    let header = lines.next().expect("envoy.yaml has a `value: |` plugin configuration");
    let indent = header.len() - header.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
        .collect()
}
