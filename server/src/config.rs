//! Typed configuration: built-in defaults that run out of the box, then an optional
//! `gantry.toml` (or the file named by `GANTRY_CONFIG`), then `GANTRY__SECTION__KEY`
//! environment overrides. Anything invalid stops start-up with a message naming the key.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Figment(Box<figment::Error>),
    #[error("invalid configuration: {key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("configuration file {0} (named by GANTRY_CONFIG) does not exist")]
    MissingFile(PathBuf),
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        ConfigError::Figment(Box::new(e))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub cluster: ClusterConfig,
    pub sim: SimConfig,
    pub kube: KubeSettings,
    pub auth: AuthConfig,
    pub demo: DemoConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address, e.g. `127.0.0.1:3000`; port 0 picks a free port (tests).
    pub addr: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://path?mode=rwc` or `postgres://user:password@host/db`. May hold a password,
    /// so it is a secret: never logged, redacted in `Debug`.
    #[serde(serialize_with = "expose")]
    pub url: SecretString,
    pub max_connections: u32,
}

fn expose<S: serde::Serializer>(s: &SecretString, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.expose_secret())
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redact_url(self.url.expose_secret()))
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// `postgres://u:pw@h/db` → `postgres://u:***@h/db`; other URLs unchanged.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterBackend {
    /// The in-process simulation of Kueue (embedded default, test double).
    Sim,
    /// Kueue on Kubernetes (kubeconfig from `KUBECONFIG`/`~/.kube/config`, or in-cluster).
    Kube,
}

/// How Gantry's pools, teams and jobs map onto Kubernetes objects (`[kube]`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeSettings {
    /// Team `nlp` runs its jobs in namespace `<prefix>nlp`.
    pub namespace_prefix: String,
    /// The node label a pool's ResourceFlavor selects its HGX nodes by.
    pub node_label: String,
    /// Pool → value of `node_label` (default `NVIDIA-<gpu model>`).
    #[serde(default)]
    pub pool_node_labels: std::collections::BTreeMap<String, String>,
    /// CPU cores requested and queued per GPU (0: GPUs only).
    pub cpu_per_gpu: u32,
    /// Memory requested and queued per GPU, in GiB (0: GPUs only).
    pub memory_per_gpu_gib: u32,
    /// Seconds to wait for the API server before a call counts as failed.
    pub timeout_s: u64,
    /// Kubeflow Trainer is installed: watch TrainJobs (templates may name a runtime).
    pub trainer: bool,
    /// A kubeconfig file to use instead of `KUBECONFIG`, `~/.kube/config` or in-cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub backend: ClusterBackend,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Sim time runs `time_scale` times faster than real time.
    Scaled,
    /// Sim time moves only on `POST /api/v1/sim/advance`.
    Manual,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    pub clock: ClockMode,
    pub time_scale: f64,
    /// Seconds (sim time) from admission until the pods of a job run.
    pub startup_s: u64,
    /// Pools that queue in Kueue's `StrictFIFO` order; the others use `BestEffortFIFO`.
    #[serde(default)]
    pub strict_fifo_pools: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Local sign-in by user name, for the embedded default only: loopback addresses only.
    pub dev_login: bool,
    /// Sessions end after this long without a request.
    pub session_idle_minutes: i64,
    /// Mark cookies `Secure` (set when served over https).
    pub secure_cookies: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// Seed pools, teams, users and templates on first start.
    pub seed: bool,
    /// Also seed a few running and queued jobs so the pools are not empty.
    pub jobs: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig {
                addr: "127.0.0.1:3000".parse().expect("static address"),
                max_body_bytes: 64 * 1024,
            },
            database: DatabaseConfig {
                url: SecretString::from("sqlite://gantry.db?mode=rwc"),
                max_connections: 8,
            },
            cluster: ClusterConfig {
                backend: ClusterBackend::Sim,
            },
            sim: SimConfig {
                clock: ClockMode::Scaled,
                time_scale: 60.0,
                startup_s: 30,
                strict_fifo_pools: Vec::new(),
            },
            kube: KubeSettings {
                namespace_prefix: "team-".into(),
                node_label: "nvidia.com/gpu.product".into(),
                pool_node_labels: [
                    ("hgx-h100", "NVIDIA-H100-80GB-HBM3"),
                    ("hgx-h200", "NVIDIA-H200"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
                cpu_per_gpu: 12,
                memory_per_gpu_gib: 200,
                timeout_s: 10,
                trainer: true,
                kubeconfig: None,
            },
            auth: AuthConfig {
                dev_login: true,
                session_idle_minutes: 12 * 60,
                secure_cookies: false,
            },
            demo: DemoConfig {
                seed: true,
                jobs: true,
            },
        }
    }
}

impl Config {
    /// Defaults, then the file, then the environment (`GANTRY__SERVER__ADDR` …).
    pub fn load() -> Result<Config, ConfigError> {
        let file = match std::env::var_os("GANTRY_CONFIG") {
            Some(path) => {
                let path = PathBuf::from(path);
                if !path.exists() {
                    return Err(ConfigError::MissingFile(path));
                }
                Some(path)
            }
            None => Some(PathBuf::from("gantry.toml")).filter(|p| p.exists()),
        };
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            fig = fig.merge(Toml::file_exact(path));
        }
        fig = fig.merge(Env::prefixed("GANTRY__").split("__"));
        Config::from_figment(fig)
    }

    pub fn from_figment(fig: Figment) -> Result<Config, ConfigError> {
        let config: Config = fig.extract()?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = self.database.url.expose_secret();
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return Err(ConfigError::Invalid {
                key: "database.url",
                message: "must start with sqlite:// or postgres://".into(),
            });
        }
        if !(self.sim.time_scale.is_finite()
            && self.sim.time_scale > 0.0
            && self.sim.time_scale <= 100_000.0)
        {
            return Err(ConfigError::Invalid {
                key: "sim.time_scale",
                message: format!(
                    "must be a number above 0 and at most 100000, got {}",
                    self.sim.time_scale
                ),
            });
        }
        if self.database.max_connections == 0 {
            return Err(ConfigError::Invalid {
                key: "database.max_connections",
                message: "must be at least 1".into(),
            });
        }
        if self.auth.dev_login && !self.server.addr.ip().is_loopback() {
            return Err(ConfigError::Invalid {
                key: "auth.dev_login",
                message: format!(
                    "local sign-in is for the embedded default only and refuses to start on the non-loopback address {}; turn it off or listen on 127.0.0.1",
                    self.server.addr
                ),
            });
        }
        if self.kube.timeout_s == 0 {
            return Err(ConfigError::Invalid {
                key: "kube.timeout_s",
                message: "must be at least 1".into(),
            });
        }
        let prefix_ok = self
            .kube
            .namespace_prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && self.kube.namespace_prefix.len() <= 40
            && !self.kube.namespace_prefix.starts_with('-');
        if !prefix_ok {
            return Err(ConfigError::Invalid {
                key: "kube.namespace_prefix",
                message:
                    "must be lowercase letters, digits and '-', at most 40, not starting with '-'"
                        .into(),
            });
        }
        if self.auth.session_idle_minutes <= 0 {
            return Err(ConfigError::Invalid {
                key: "auth.session_idle_minutes",
                message: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    pub fn is_sqlite(&self) -> bool {
        self.database.url.expose_secret().starts_with("sqlite:")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        for (k, v) in pairs {
            // parsed as the environment provider parses values ("false" is a bool)
            let value: figment::value::Value = v.parse().expect("any string parses");
            fig = fig.merge((*k, value));
        }
        Config::from_figment(fig)
    }

    #[test]
    fn defaults_run_out_of_the_box() {
        let c = with(&[]).unwrap();
        assert_eq!(c.server.addr.port(), 3000);
        assert_eq!(c.sim.clock, ClockMode::Scaled);
        assert!(c.is_sqlite());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail decides the error type
    fn environment_overrides_use_double_underscores() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("GANTRY__SERVER__ADDR", "127.0.0.1:4000");
            jail.set_env("GANTRY__SIM__CLOCK", "manual");
            jail.set_env("GANTRY__SIM__TIME_SCALE", "120");
            jail.set_env(
                "GANTRY__DATABASE__URL",
                "postgres://postgres@127.0.0.1/gantry",
            );
            let c = Config::load().map_err(|e| e.to_string())?;
            assert_eq!(c.server.addr.port(), 4000);
            assert_eq!(c.sim.clock, ClockMode::Manual);
            assert_eq!(c.sim.time_scale, 120.0);
            assert!(!c.is_sqlite());
            Ok(())
        });
    }

    #[test]
    fn invalid_values_name_the_key() {
        let e = with(&[("sim.clock", "sometimes")]).unwrap_err().to_string();
        assert!(e.contains("sim.clock"), "{e}");
        let e = with(&[("sim.time_scale", "-1")]).unwrap_err().to_string();
        assert!(e.contains("sim.time_scale"), "{e}");
        let e = with(&[("server.addr", "nowhere")]).unwrap_err().to_string();
        assert!(e.contains("server.addr"), "{e}");
        let e = with(&[("database.url", "mysql://x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("database.url"), "{e}");
    }

    #[test]
    fn dev_login_refuses_a_public_address() {
        let e = with(&[("server.addr", "0.0.0.0:3000")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("auth.dev_login"), "{e}");
        assert!(with(&[("server.addr", "0.0.0.0:3000"), ("auth.dev_login", "false")]).is_ok());
    }

    #[test]
    fn database_passwords_stay_out_of_debug() {
        let c = with(&[("database.url", "postgres://gantry:hunter2@db/gantry")]).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("gantry:***@db"), "{shown}");
    }
}
