//! Typed configuration: built-in defaults that run out of the box, then an optional
//! `gantry.toml` (or the file named by `GANTRY_CONFIG`), then `GANTRY__SECTION__KEY`
//! environment overrides. Anything invalid stops start-up with a message naming the key.

mod auth;

pub use auth::{AuthConfig, GroupGrant, OidcConfig};

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use openidconnect::url;
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
    pub usage: UsageConfig,
    pub metrics: MetricsConfig,
    pub demo: DemoConfig,
}

/// Where GPU utilization comes from (`[metrics]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsBackend {
    /// Made-up training-shaped series for the sim cluster's jobs (deterministic per seed).
    Sim,
    /// PromQL over Prometheus' HTTP API on DCGM exporter series (`[metrics.prometheus]`).
    Prometheus,
    /// No metrics: usage reports count allocation only.
    None,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Unset: `sim` with the sim cluster, `none` with Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<MetricsBackend>,
    /// The sim back end's seed.
    pub seed: u64,
    pub prometheus: PrometheusConfig,
}

/// `[metrics.prometheus]`: where the DCGM exporter's series are kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Prometheus' base URL, e.g. `http://prometheus-k8s.monitoring.svc:9090`.
    pub url: String,
    /// A query not answered by then counts as "metrics unavailable".
    pub timeout_s: f64,
}

impl Config {
    pub fn metrics_backend(&self) -> MetricsBackend {
        self.metrics.backend.unwrap_or(match self.cluster.backend {
            ClusterBackend::Sim => MetricsBackend::Sim,
            ClusterBackend::Kube => MetricsBackend::None,
        })
    }
}

/// `[usage]`: GPU accounting.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageConfig {
    /// The IANA time zone whose days, weeks and months reports count in, e.g. `Europe/Berlin`.
    pub time_zone: String,
}

impl UsageConfig {
    pub fn tz(&self) -> chrono_tz::Tz {
        self.time_zone.parse().unwrap_or(chrono_tz::Tz::UTC)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address, e.g. `127.0.0.1:3000`; port 0 picks a free port (tests).
    pub addr: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// A client must send a request's whole header within this many seconds, or the
    /// connection is closed (slowloris). Hyper starts this clock again when a kept-alive
    /// connection waits for its next request.
    pub header_read_timeout_s: f64,
    /// A request's whole body must arrive within this many seconds of its header (408).
    pub body_timeout_s: f64,
    /// A connection on which no byte moves either way for this long is closed: an idle
    /// keep-alive connection, a client that stopped reading its response.
    pub idle_timeout_s: f64,
    /// Live event streams (`/api/v1/events`) one user may hold at once; one more is a 429.
    pub max_streams_per_user: usize,
    /// A page rendered for a session may be served again to that session for this many
    /// milliseconds, while no write finished and no other action came in (see
    /// `http::page_cache`); 0 turns it off. At most 10000. The same bounds the reads that
    /// every page makes (the signed-in user, a page of jobs, the pools' rows), answered to any
    /// request while nothing was written (`db::memo`): what is written other than through
    /// this process shows within it.
    pub page_cache_ms: u64,
    /// Reverse proxies whose `X-Forwarded-For` and `X-Forwarded-Host` are believed, as
    /// CIDRs (`10.0.0.0/8`, `::1/128`) or single addresses. Empty (the default): forwarded
    /// headers count from nobody; the socket's peer is the client, and the cross-site check
    /// compares with `Host` and the configured public origin.
    pub trusted_proxies: Vec<String>,
    /// Private, loopback and link-local networks that webhooks may post to, as CIDRs
    /// (`10.20.0.0/16`) or single addresses: an in-house chat server, say. Empty (the
    /// default): webhooks reach public addresses only, so nobody's webhook makes Gantry post
    /// to the cluster's internal services or a cloud's metadata address (server-side
    /// request forgery). A name is checked on each delivery, against every address it
    /// resolves to.
    #[serde(default)]
    pub webhook_networks: Vec<String>,
    /// The address people reach Gantry at (`https://gantry.example.com`), for the links in
    /// webhook messages. Unset: the origin of `auth.oidc.redirect_url`, else
    /// `http://<server.addr>`.
    #[serde(default)]
    pub public_url: Option<String>,
}

impl ServerConfig {
    /// The parsed `trusted_proxies` (checked by [`Config::validate`]; a bad entry is skipped).
    pub fn trusted_proxy_nets(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|s| parse_net(s).ok())
            .collect()
    }

    /// The parsed `webhook_networks` (checked by [`Config::validate`]).
    pub fn webhook_nets(&self) -> Vec<ipnet::IpNet> {
        self.webhook_networks
            .iter()
            .filter_map(|s| parse_net(s).ok())
            .collect()
    }
}

/// A CIDR, or one address as a /32 (/128).
fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("'{s}' is not a CIDR (10.0.0.0/8) or an IP address"))
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

/// `postgres://u:pw@h/db` → `postgres://u:***@h/db`, and a secret given as a query
/// parameter (`?password=…`, which sqlx and libpq take too; `sslpassword`, `token`, …) →
/// `?password=***`; other URLs unchanged.
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &base[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &base[..s + 3], &creds[..c], &base[at..]),
                None => base.to_string(),
            }
        }
        _ => base.to_string(),
    };
    if let Some(q) = query {
        const SECRET: [&str; 7] = [
            "password",
            "passwd",
            "pwd",
            "sslpassword",
            "token",
            "secret",
            "api_key",
        ];
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if SECRET.contains(&k.to_ascii_lowercase().as_str()) => {
                    format!("{k}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
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
pub struct DemoConfig {
    /// Seed pools, teams, users and templates on first start.
    pub seed: bool,
    /// Also seed a few running and queued jobs so the pools are not empty.
    pub jobs: bool,
    /// Also seed 30 days of finished jobs, so the Usage page is full on a first run.
    pub history: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig {
                addr: "127.0.0.1:3000".parse().expect("static address"),
                max_body_bytes: 64 * 1024,
                header_read_timeout_s: 10.0,
                body_timeout_s: 30.0,
                idle_timeout_s: 120.0,
                max_streams_per_user: 32,
                page_cache_ms: 1000,
                trusted_proxies: Vec::new(),
                webhook_networks: Vec::new(),
                public_url: None,
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
                dev_login: None,
                session_idle_minutes: 12.0 * 60.0,
                session_absolute_minutes: 24.0 * 60.0,
                secure_cookies: false,
                oidc: None,
            },
            usage: UsageConfig {
                time_zone: "UTC".into(),
            },
            metrics: MetricsConfig {
                backend: None,
                seed: 1,
                prometheus: PrometheusConfig {
                    url: "http://127.0.0.1:9090".into(),
                    timeout_s: 5.0,
                },
            },
            demo: DemoConfig {
                seed: true,
                jobs: true,
                history: true,
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
        for (key, v) in [
            (
                "server.header_read_timeout_s",
                self.server.header_read_timeout_s,
            ),
            ("server.body_timeout_s", self.server.body_timeout_s),
            ("server.idle_timeout_s", self.server.idle_timeout_s),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!(
                        "must be a number of seconds above 0 and at most 86400, got {v}"
                    ),
                });
            }
        }
        if self.server.max_streams_per_user == 0 {
            return Err(ConfigError::Invalid {
                key: "server.max_streams_per_user",
                message: "must be at least 1".into(),
            });
        }
        if self.server.page_cache_ms > 10_000 {
            return Err(ConfigError::Invalid {
                key: "server.page_cache_ms",
                message: format!(
                    "must be 0 (off) to 10000 milliseconds, got {}",
                    self.server.page_cache_ms
                ),
            });
        }
        for p in &self.server.trusted_proxies {
            parse_net(p).map_err(|message| ConfigError::Invalid {
                key: "server.trusted_proxies",
                message,
            })?;
        }
        for p in &self.server.webhook_networks {
            parse_net(p).map_err(|message| ConfigError::Invalid {
                key: "server.webhook_networks",
                message,
            })?;
        }
        if self.database.max_connections == 0 {
            return Err(ConfigError::Invalid {
                key: "database.max_connections",
                message: "must be at least 1".into(),
            });
        }
        if self.auth.dev_login == Some(true) && self.auth.oidc.is_some() {
            return Err(ConfigError::Invalid {
                key: "auth.dev_login",
                message: "local sign-in cannot be turned on together with [auth.oidc]; remove one"
                    .into(),
            });
        }
        if let Some(oidc) = &self.auth.oidc {
            oidc.validate()?;
        }
        if self.usage.time_zone.parse::<chrono_tz::Tz>().is_err() {
            return Err(ConfigError::Invalid {
                key: "usage.time_zone",
                message: format!(
                    "'{}' is not an IANA time zone name such as UTC or Europe/Berlin",
                    self.usage.time_zone
                ),
            });
        }
        if self.auth.dev_login() && !self.server.addr.ip().is_loopback() {
            return Err(ConfigError::Invalid {
                key: "auth.dev_login",
                message: format!(
                    "local sign-in is for the embedded default only and refuses to start on the non-loopback address {}; turn it off or listen on 127.0.0.1",
                    self.server.addr
                ),
            });
        }
        if self.metrics_backend() == MetricsBackend::Prometheus {
            let p = &self.metrics.prometheus;
            if !(p.url.starts_with("http://") || p.url.starts_with("https://")) {
                return Err(ConfigError::Invalid {
                    key: "metrics.prometheus.url",
                    message: format!("must be an http:// or https:// URL, got '{}'", p.url),
                });
            }
            if !(p.timeout_s.is_finite() && p.timeout_s > 0.0 && p.timeout_s <= 300.0) {
                return Err(ConfigError::Invalid {
                    key: "metrics.prometheus.timeout_s",
                    message: format!(
                        "must be above 0 and at most 300 seconds, got {}",
                        p.timeout_s
                    ),
                });
            }
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
        for (key, v) in [
            ("auth.session_idle_minutes", self.auth.session_idle_minutes),
            (
                "auth.session_absolute_minutes",
                self.auth.session_absolute_minutes,
            ),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 60.0 * 24.0 * 366.0) {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("must be above 0 and at most a year of minutes, got {v}"),
                });
            }
        }
        Ok(())
    }

    pub fn is_sqlite(&self) -> bool {
        self.database.url.expose_secret().starts_with("sqlite:")
    }
}

#[cfg(test)]
mod tests;
