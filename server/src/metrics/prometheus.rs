//! The `prometheus` metrics back end: PromQL over Prometheus' HTTP API (`/api/v1/query`,
//! `/api/v1/query_range`) on NVIDIA DCGM exporter series.
//!
//! A job's GPUs are the series whose pod belongs to the job's JobSet or TrainJob (pods are
//! named after the object, `gantry-<id>-…`) in the team's namespace. Real deployments label
//! them differently, so both are accepted: `namespace`/`pod` (exporter scraped with
//! `honor_labels`, or the pod mapping relabelled) and `exported_namespace`/`exported_pod`
//! (Prometheus renames the exporter's labels when the scrape target carries its own), and
//! the node as `Hostname` (dcgm-exporter ≤ 4.5.3-4.8.2) or `hostname` (later releases).
//! Utilization is `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (a ratio, the better measure) where a GPU
//! reports it, `DCGM_FI_DEV_GPU_UTIL` (percent) otherwise.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;

use super::{GpuReading, GpuTrack, JobGpus, JobSeries, Metrics, MetricsError};

const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
const GR_ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";

/// Prometheus' most points per series in one range query.
const MAX_POINTS: i64 = 11_000;

pub struct PrometheusMetrics {
    http: reqwest::Client,
    /// The server's base URL, ending in `/`.
    base: reqwest::Url,
    timeout: Duration,
    /// `kube.namespace_prefix`: team `nlp` runs in `<prefix>nlp`.
    namespace_prefix: String,
}

impl std::fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusMetrics")
            .field("base", &crate::config::redact_url(self.base.as_str()))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `{"status": "success", "data": {"resultType": …, "result": […]}}`, or an error.
#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    result: Vec<Sample>,
}

/// One series of a matrix (`values`) or an instant vector (`value`); values are strings.
#[derive(Deserialize)]
struct Sample {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
    #[serde(default)]
    value: Option<(f64, String)>,
}

/// A GPU of the job as its series name it: the pod it serves (which orders the job's nodes)
/// and its index on the node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GpuKey {
    pod: NaturalKey,
    gpu: u32,
}

/// Orders `job-2` before `job-10`: runs of digits compare as numbers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NaturalKey(Vec<(String, u64)>);

impl NaturalKey {
    fn new(s: &str) -> NaturalKey {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_ascii_digit() {
                let mut n = u64::from(c.to_digit(10).unwrap_or(0));
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n.saturating_mul(10).saturating_add(u64::from(d));
                    chars.next();
                }
                parts.push((std::mem::take(&mut text), n));
            } else {
                text.push(c);
            }
        }
        parts.push((text, u64::MAX));
        NaturalKey(parts)
    }
}

impl PrometheusMetrics {
    /// `url` is Prometheus' base URL (`http://prometheus.monitoring:9090`, or under a path
    /// prefix); every request gives up after `timeout`.
    pub fn new(
        url: &str,
        timeout: Duration,
        namespace_prefix: &str,
    ) -> Result<PrometheusMetrics, String> {
        let mut base = reqwest::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(format!("{url}: must be an http:// or https:// URL"));
        }
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(PrometheusMetrics {
            http,
            base,
            timeout,
            namespace_prefix: namespace_prefix.to_string(),
        })
    }

    /// The series of `metric` for the job's pods, under either label naming: what
    /// [`Metrics::series`] asks for one job.
    #[cfg(test)]
    fn selector(&self, job: &JobGpus, metric: &str) -> String {
        self.select_many(std::slice::from_ref(job), metric, |s| s)
    }

    /// `metric` for the pods of every job in `jobs`, under either label naming: one selector
    /// per namespace (team) and naming, that namespace's jobs' pods in one pattern, each with
    /// `wrap` applied, joined by `or`.
    fn select_many(
        &self,
        jobs: &[JobGpus],
        metric: &str,
        wrap: impl Fn(String) -> String,
    ) -> String {
        let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for job in jobs {
            by_ns
                .entry(format!("{}{}", self.namespace_prefix, job.team))
                .or_default()
                .push(format!(
                    "{}-.+",
                    crate::domain::workload::object_name(&job.job_id)
                ));
        }
        by_ns
            .iter()
            .flat_map(|(ns, pods)| {
                let ns = promql_string(ns);
                let pods = promql_string(&pods.join("|"));
                [
                    wrap(format!("{metric}{{namespace={ns},pod=~{pods}}}")),
                    wrap(format!(
                        "{metric}{{exported_namespace={ns},exported_pod=~{pods}}}"
                    )),
                ]
            })
            .collect::<Vec<_>>()
            .join(" or ")
    }

    /// The job's GPU a series belongs to, and the node it is on: its pod (in the job's
    /// namespace) under either label naming.
    fn gpu_of(&self, job: &JobGpus, labels: &BTreeMap<String, String>) -> Option<(GpuKey, String)> {
        let prefix = format!("{}-", crate::domain::workload::object_name(&job.job_id));
        let ns = format!("{}{}", self.namespace_prefix, job.team);
        let pod = [("pod", "namespace"), ("exported_pod", "exported_namespace")]
            .iter()
            .filter(|(_, n)| labels.get(*n) == Some(&ns))
            .filter_map(|(p, _)| labels.get(*p))
            .find(|p| p.starts_with(&prefix))?;
        let gpu = labels.get("gpu")?.parse().ok()?;
        let node = labels
            .get("Hostname")
            .or_else(|| labels.get("hostname"))
            .cloned()
            .unwrap_or_else(|| pod.clone());
        Some((
            GpuKey {
                pod: NaturalKey::new(pod),
                gpu,
            },
            node,
        ))
    }

    async fn get(
        &self,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Vec<Sample>, MetricsError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| MetricsError::Unavailable(e.to_string()))?;
        let res = self
            .http
            .get(url)
            .query(params)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = res.status();
        let body = res.text().await.map_err(|e| self.unreachable(&e))?;
        let answer: Answer = serde_json::from_str(&body).map_err(|_| {
            MetricsError::Unavailable(format!(
                "Prometheus answered HTTP {status} with something that is not its API's JSON"
            ))
        })?;
        if answer.status != "success" {
            tracing::warn!(%status, error = answer.error.as_deref().unwrap_or(""), "Prometheus refused a query");
            // Its words quote the query (the job's labels): logged above, not shown.
            let why = format!("Prometheus refused the query (HTTP {status})");
            return Err(if status.is_client_error() {
                MetricsError::Refused(why)
            } else {
                MetricsError::Unavailable(why)
            });
        }
        Ok(answer.data.map(|d| d.result).unwrap_or_default())
    }

    fn unreachable(&self, e: &reqwest::Error) -> MetricsError {
        if e.is_timeout() {
            return MetricsError::TimedOut(format!(
                "Prometheus did not answer within {} s",
                self.timeout.as_secs_f64()
            ));
        }
        MetricsError::Unavailable(if e.is_connect() {
            "Prometheus could not be reached".to_string()
        } else {
            "the connection to Prometheus failed".to_string()
        })
    }

    async fn range(
        &self,
        query: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<Vec<Sample>, MetricsError> {
        self.get(
            "api/v1/query_range",
            &[
                ("query", query),
                ("start", unix(from)),
                ("end", unix(to)),
                (
                    "step",
                    format!("{}", step.num_milliseconds() as f64 / 1000.0),
                ),
            ],
        )
        .await
    }

    async fn instant(&self, query: String, at: DateTime<Utc>) -> Result<Vec<Sample>, MetricsError> {
        self.get("api/v1/query", &[("query", query), ("time", unix(at))])
            .await
    }
}

/// A PromQL string literal.
fn promql_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Seconds since the epoch, as Prometheus takes times.
fn unix(t: DateTime<Utc>) -> String {
    format!("{:.3}", t.timestamp_millis() as f64 / 1000.0)
}

fn number(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[async_trait::async_trait]
impl Metrics for PrometheusMetrics {
    async fn series(
        &self,
        job: &JobGpus,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<JobSeries, MetricsError> {
        let mut one = self
            .series_many(std::slice::from_ref(job), from, to, step)
            .await?;
        Ok(one.remove(0))
    }

    async fn series_many(
        &self,
        jobs: &[JobGpus],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<Vec<JobSeries>, MetricsError> {
        let times = super::steps(from, to, step);
        if jobs.is_empty() || times.is_empty() || times.len() as i64 > MAX_POINTS {
            return Ok(jobs
                .iter()
                .map(|_| JobSeries {
                    times: times.clone(),
                    gpus: Vec::new(),
                })
                .collect());
        }
        let (util, active, fb, power) = futures::try_join!(
            self.range(self.select_many(jobs, GPU_UTIL, |s| s), from, to, step),
            self.range(
                self.select_many(jobs, GR_ENGINE_ACTIVE, |s| s),
                from,
                to,
                step
            ),
            self.range(self.select_many(jobs, FB_USED, |s| s), from, to, step),
            self.range(self.select_many(jobs, POWER_USAGE, |s| s), from, to, step),
        )?;
        // Per job, GPU and metric, the value at each of `times`.
        type Columns = [Vec<Option<f64>>; 4];
        let mut by_gpu: Vec<BTreeMap<GpuKey, (String, Columns)>> =
            jobs.iter().map(|_| BTreeMap::new()).collect();
        let step_s = step.num_milliseconds() as f64 / 1000.0;
        let from_s = from.timestamp_millis() as f64 / 1000.0;
        for (column, samples) in [util, active, fb, power].into_iter().enumerate() {
            for sample in samples {
                let Some((j, (key, node))) = jobs
                    .iter()
                    .enumerate()
                    .find_map(|(j, job)| self.gpu_of(job, &sample.metric).map(|k| (j, k)))
                else {
                    continue;
                };
                let entry = by_gpu[j]
                    .entry(key)
                    .or_insert_with(|| (node, std::array::from_fn(|_| vec![None; times.len()])));
                for (ts, v) in &sample.values {
                    let k = ((ts - from_s) / step_s).round();
                    if k >= 0.0 && (k as usize) < times.len() {
                        if let Some(v) = number(v) {
                            entry.1[column][k as usize] = Some(v);
                        }
                    }
                }
            }
        }
        Ok(by_gpu
            .into_iter()
            .map(|gpus| JobSeries {
                times: times.clone(),
                gpus: gpus
                    .into_iter()
                    .map(|(key, (node, [util, active, fb, power]))| GpuTrack {
                        node: Some(node),
                        gpu: key.gpu,
                        readings: (0..times.len())
                            .map(|i| {
                                let util_pct = active[i].map(|a| a * 100.0).or(util[i])?;
                                Some(GpuReading {
                                    util_pct: util_pct.clamp(0.0, 100.0),
                                    fb_used_mib: fb[i].unwrap_or(0.0),
                                    power_w: power[i].unwrap_or(0.0),
                                })
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect())
    }

    async fn interval_mean(
        &self,
        job: &JobGpus,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Option<f64>, MetricsError> {
        let secs = (end - start).num_seconds();
        if secs <= 0 {
            return Ok(None);
        }
        let over = |metric: &str| {
            self.select_many(std::slice::from_ref(job), metric, |s| {
                format!("avg_over_time({s}[{secs}s])")
            })
        };
        let (util, active) = futures::try_join!(
            self.instant(over(GPU_UTIL), end),
            self.instant(over(GR_ENGINE_ACTIVE), end),
        )?;
        // Per GPU: the engine-active ratio where it is reported, else utilization / 100.
        let mut per_gpu: BTreeMap<GpuKey, f64> = BTreeMap::new();
        for (samples, scale, prefer) in [(util, 0.01, false), (active, 1.0, true)] {
            for s in samples {
                let (Some((key, _)), Some(v)) = (
                    self.gpu_of(job, &s.metric),
                    s.value.as_ref().and_then(|(_, v)| number(v)),
                ) else {
                    continue;
                };
                let v = (v * scale).clamp(0.0, 1.0);
                if prefer {
                    per_gpu.insert(key, v);
                } else {
                    per_gpu.entry(key).or_insert(v);
                }
            }
        }
        if per_gpu.is_empty() {
            return Ok(None);
        }
        Ok(Some(per_gpu.values().sum::<f64>() / per_gpu.len() as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus' words on a refused query quote the query (the job's pods and namespace):
    /// they go to the log, and the viewer is told only that it refused, with its status.
    #[tokio::test]
    async fn a_refused_query_is_told_without_prometheus_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(|| async {
            (
                http::StatusCode::BAD_REQUEST,
                r#"{"status":"error","errorType":"bad_data","error":"1:23: parse error: unexpected \"}\" in label matching, expected string, near namespace=\"team-secret\""}"#,
            )
        });
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let m = PrometheusMetrics::new(&format!("http://{addr}/"), Duration::from_secs(5), "team-")
            .unwrap();
        let Err(e) = m.get("api/v1/query", &[("query", "up".to_string())]).await else {
            panic!("a refused query answered");
        };
        assert_eq!(
            e.reason(),
            "Prometheus refused the query (HTTP 400 Bad Request)"
        );
        assert!(matches!(e, MetricsError::Refused(_)), "{e:?}");
        server.abort();
    }

    #[test]
    fn pods_order_naturally() {
        let mut pods = ["j-node-0-10-a", "j-node-0-2-b", "j-node-0-1-c"]
            .map(NaturalKey::new)
            .to_vec();
        pods.sort();
        assert_eq!(
            pods,
            ["j-node-0-1-c", "j-node-0-2-b", "j-node-0-10-a"].map(NaturalKey::new)
        );
    }

    #[test]
    fn the_selector_names_the_jobs_pods_under_both_label_namings() {
        let m = PrometheusMetrics::new(
            "http://127.0.0.1:9090/prom",
            Duration::from_secs(1),
            "team-",
        )
        .unwrap();
        let job = JobGpus {
            job_id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
            team: "nlp".into(),
            gpus: 16,
            since: Utc::now(),
        };
        assert_eq!(
            m.selector(&job, GPU_UTIL),
            "DCGM_FI_DEV_GPU_UTIL{namespace=\"team-nlp\",pod=~\"gantry-0190a1b2c3d47e5f8a9b0c1d2e3f4a5b-.+\"} \
             or DCGM_FI_DEV_GPU_UTIL{exported_namespace=\"team-nlp\",exported_pod=~\"gantry-0190a1b2c3d47e5f8a9b0c1d2e3f4a5b-.+\"}"
        );
        assert_eq!(m.base.as_str(), "http://127.0.0.1:9090/prom/");
        assert_eq!(promql_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert!(PrometheusMetrics::new("ftp://x", Duration::from_secs(1), "t-").is_err());
    }
}
