//! GPUs: a job's utilization, and each pool's nodes with their allocation and utilization.

use super::*;

/// A node of the Pools grid with every GPU free.
fn empty_node(name: String, gpus: usize) -> GridNode {
    GridNode {
        name,
        cells: vec![
            GridCell {
                job: None,
                job_id: None,
                util_pct: None
            };
            gpus
        ],
    }
}

/// The most samples an ended run's charts get (its whole run, downsampled).
const MAX_SAMPLES: i64 = 240;

impl Portal {
    /// The job's per-GPU utilization: a running job's last two hours, a sample a minute; an
    /// ended job's whole last run, downsampled to at most [`MAX_SAMPLES`] samples. With the
    /// mean utilization, memory and power, and the idle flag.
    /// Seen by whoever may see the job.
    pub async fn job_utilization(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<JobUtilization, Error> {
        self.job_utilization_as(viewer, id, "", |u| u).await
    }

    /// [`Portal::job_utilization`] as the job page's GPU panel draws it (the mean series and
    /// each GPU's latest reading: `GpuPanelData`), kept in the read memo in that form: a copy
    /// of every GPU's series, made and reduced on every load, was 1-2 % of a job page.
    pub async fn job_gpu_panel(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<app::model::GpuPanelData, Error> {
        self.job_utilization_as(viewer, id, "panel ", app::model::GpuPanelData::from)
            .await
    }

    /// [`Portal::job_utilization`]'s answer in the form `into` makes of it, kept in the read
    /// memo in that form (`form` names it in the key).
    async fn job_utilization_as<T: Clone + Send + Sync + 'static>(
        &self,
        viewer: &Viewer,
        id: &str,
        form: &str,
        into: fn(JobUtilization) -> T,
    ) -> Result<T, Error> {
        // The job and its last run in one statement: the panel is drawn with every job page,
        // and answered from memory while nothing was written (`db::memo`).
        let read = self.db.memo(format!("job and last interval {id:?}"), || {
            self.db.job_and_last_interval(id)
        });
        let (row, last) = Self::visible(viewer, id, read, |(r, _)| r).await?;
        let mut out = JobUtilization {
            job_id: row.id.clone(),
            available: false,
            message: None,
            from: None,
            to: None,
            step_s: 60,
            gpus: Vec::new(),
            mean: Vec::new(),
            idle: false,
        };
        let Some(metrics) = &self.metrics else {
            out.message = Some("no metrics back end is configured".into());
            return Ok(into(out));
        };
        let Some((start, end)) = last else {
            out.message = Some("the job has not run yet".into());
            return Ok(into(out));
        };
        // The answer for this run of the job is kept in the read memo (`db::memo`): while
        // nothing is written and for its time to live (`server.page_cache_ms`, 1 s by
        // default), a job page's loads, by any viewer, ask the metrics back end (a Prometheus
        // range query) once, not once each. The key holds all the answer depends on but the
        // clock: the job, its GPUs, its run and its nodes; the range ends at the clock when
        // it was read, at most the time to live ago.
        let key = format!(
            "job utilization {form}{:?} {} {start} {end:?} {:?}",
            row.id, row.gpus, row.node_names
        );
        let answer = self
            .db
            .memo(key, || async {
                Ok(into(
                    Self::utilization_in(
                        metrics.as_ref(),
                        &row,
                        out,
                        start,
                        end,
                        self.cluster.now(),
                    )
                    .await,
                ))
            })
            .await?;
        Ok(answer)
    }

    /// [`Portal::job_utilization`]'s answer at `now`: the per-GPU and mean series, the idle
    /// flag, or, where the metrics back end failed, the message saying so (`available` false;
    /// kept as an answer is, so a failing back end is asked again after the memo's time to
    /// live, not on every load).
    async fn utilization_in(
        metrics: &dyn crate::metrics::Metrics,
        row: &JobRow,
        mut out: JobUtilization,
        start: chrono::DateTime<chrono::Utc>,
        end: Option<chrono::DateTime<chrono::Utc>>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> JobUtilization {
        let to = end.unwrap_or(now).min(now);
        // A running job: the last two hours, a sample a minute, the newest at now, so the
        // heatmap shows the latest readings and the idle check has its 30 minutes. An ended
        // run: the whole of it, downsampled to at most MAX_SAMPLES samples.
        if end.is_some() {
            let whole = (to - start).num_seconds().max(60);
            let per = ((whole + MAX_SAMPLES - 1) / MAX_SAMPLES).max(60);
            out.step_s = (per + 59) / 60 * 60;
        }
        let step = chrono::TimeDelta::seconds(out.step_s);
        let from = if end.is_some() {
            start
        } else {
            start.max(to - chrono::TimeDelta::hours(2))
        };
        let from = to - step * ((to - from).num_seconds() / out.step_s) as i32;
        let job = crate::domain::workload::JobGpus {
            job_id: row.id.clone(),
            team: row.team.clone(),
            gpus: row.gpus,
            since: start,
        };
        let series = match metrics.series(&job, from, to, step).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(job.id = %row.id, error = %e, "job utilization: metrics unavailable");
                out.message = Some(format!("{e} ({})", now.format("%H:%M UTC")));
                return out;
            }
        };
        let per_node = 8u32;
        out.gpus = series
            .gpus
            .iter()
            .enumerate()
            .map(|(i, track)| {
                // The back end's node name (DCGM's Hostname) when it has one, else the node
                // the cluster placed the job on, 8 GPUs each.
                let (node, gpu) = match &track.node {
                    Some(node) => (node.clone(), track.gpu),
                    None => {
                        let k = i as u32 / per_node;
                        let node = row
                            .node_names
                            .get(k as usize)
                            .cloned()
                            .unwrap_or_else(|| format!("node {}", k + 1));
                        (node, i as u32 % per_node)
                    }
                };
                GpuSeries {
                    node,
                    gpu,
                    util_pct: Vec::new(),
                }
            })
            .collect();
        let mut samples = Vec::new();
        // A time counts when every GPU has a reading at it.
        for (i, t) in series.times.iter().enumerate() {
            let at_t: Option<Vec<_>> = series.gpus.iter().map(|g| g.readings[i]).collect();
            let Some(at_t) = at_t.filter(|r| !r.is_empty()) else {
                continue;
            };
            for (s, r) in out.gpus.iter_mut().zip(&at_t) {
                s.util_pct.push(r.util_pct);
            }
            let n = at_t.len() as f64;
            out.mean.push(MeanSample {
                at: *t,
                util_pct: at_t.iter().map(|r| r.util_pct).sum::<f64>() / n,
                fb_used_gib: at_t.iter().map(|r| r.fb_used_mib).sum::<f64>() / n / 1024.0,
                power_w: at_t.iter().map(|r| r.power_w).sum::<f64>() / n,
            });
            samples.push((*t, at_t.iter().map(|r| r.util_pct).collect()));
        }
        if out.mean.is_empty() {
            out.message = Some("the metrics back end has no samples for this run".into());
        }
        out.available = !out.mean.is_empty();
        out.idle = end.is_none() && crate::metrics::is_idle(&samples, to);
        out.from = Some(from);
        out.to = Some(to);
        out
    }

    /// The pools' names, in order: every page reads them with its viewer (`PageViewer`), so
    /// from the read memo.
    pub async fn pool_names(&self) -> Result<Vec<String>, Error> {
        let db = &self.db;
        let names = db
            .memo("pool_names".to_string(), || async {
                Ok(db.list_pools().await?.into_iter().map(|p| p.name).collect())
            })
            .await?;
        Ok(names)
    }

    pub async fn list_pools(&self, _viewer: &Viewer) -> Result<Vec<Pool>, Error> {
        Ok(self
            .cluster
            .pools()
            .await?
            .into_iter()
            .map(|p| Pool {
                teams: p
                    .teams
                    .iter()
                    .map(|t| QuotaUse {
                        team: t.team.clone(),
                        pool: p.name.clone(),
                        nominal_gpus: t.quota.nominal,
                        borrowing_limit_gpus: t.quota.borrowing_limit,
                        used_gpus: t.used,
                        borrowed_gpus: t.borrowed,
                    })
                    .collect(),
                gpus_free: p.gpus_total - p.gpus_allocated,
                name: p.name,
                gpu_model: p.gpu_model,
                nodes: p.nodes,
                gpus_per_node: GPUS_PER_NODE,
                gpus_total: p.gpus_total,
                gpus_allocated: p.gpus_allocated,
                free_nodes: p.free_nodes,
                queued_jobs: p.pending,
            })
            .collect())
    }

    pub async fn pool_grids(&self, viewer: &Viewer) -> Result<Vec<PoolGrid>, Error> {
        let per_node = 8usize;
        let now = self.cluster.now();
        let mut grids: Vec<PoolGrid> = self
            .db
            .memo("pools".into(), || self.db.list_pools())
            .await?
            .into_iter()
            .map(|p| PoolGrid {
                nodes: self
                    .cluster
                    .node_names(&p.name, p.nodes)
                    .into_iter()
                    .map(|n| empty_node(n, per_node))
                    .collect(),
                pool: p.name,
                gpu_model: p.gpu_model,
                metrics_note: None,
            })
            .collect();
        let mut metrics_note = None;
        // The grid's three reads are the same for every viewer until something is written.
        let running_since = self
            .db
            .memo("open interval starts".into(), || {
                self.db.open_interval_starts()
            })
            .await?;
        let held: Vec<JobRow> = self
            .db
            .memo("active jobs".into(), || self.db.active_jobs())
            .await?
            .into_iter()
            .filter(|j| matches!(j.state, JobState::Admitted | JobState::Running))
            .collect();
        // Every running job's GPUs now, one query per pool; a back end that is down leaves
        // the cells coloured by allocation only (and is not asked again for the next pool).
        let mut readings: HashMap<String, Vec<crate::metrics::GpuTrack>> = HashMap::new();
        if let Some(m) = &self.metrics {
            for grid in &grids {
                let jobs: Vec<crate::domain::workload::JobGpus> = held
                    .iter()
                    .filter(|j| j.pool == grid.pool)
                    .filter_map(|j| {
                        running_since
                            .get(&j.id)
                            .map(|since| crate::domain::workload::JobGpus {
                                job_id: j.id.clone(),
                                team: j.team.clone(),
                                gpus: j.gpus,
                                since: *since,
                            })
                    })
                    .collect();
                if jobs.is_empty() || metrics_note.is_some() {
                    continue;
                }
                match m
                    .series_many(&jobs, now, now, chrono::TimeDelta::seconds(60))
                    .await
                {
                    Ok(all) => {
                        for (job, s) in jobs.iter().zip(all) {
                            readings.insert(job.job_id.clone(), s.gpus);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(pool = %grid.pool, error = %e, "pools grid: no utilization");
                        metrics_note = Some(format!(
                            "Utilization not shown. Metrics unavailable: {} ({}).",
                            e.reason(),
                            now.format("%H:%M UTC")
                        ));
                    }
                }
            }
        }
        for job in held {
            let Some(grid) = grids.iter_mut().find(|g| g.pool == job.pool) else {
                continue;
            };
            let visible = Self::may_see(viewer, &job.team);
            let readings = readings.get(&job.id);
            let mut g = 0u32;
            for node in &job.node_names {
                let row = match grid.nodes.iter().position(|n| &n.name == node) {
                    Some(i) => i,
                    None => {
                        grid.nodes.push(empty_node(node.clone(), per_node));
                        grid.nodes.len() - 1
                    }
                };
                for cell in grid.nodes[row].cells.iter_mut().filter(|c| c.job.is_none()) {
                    if g >= job.gpus {
                        break;
                    }
                    let util = readings
                        .and_then(|tracks| tracks.get(g as usize))
                        .and_then(|t| t.readings.first().copied().flatten())
                        .map(|r| r.util_pct);
                    *cell = GridCell {
                        job: Some(if visible {
                            job.name.clone()
                        } else {
                            "another team".into()
                        }),
                        job_id: visible.then(|| job.id.clone()),
                        util_pct: util,
                    };
                    g += 1;
                }
            }
        }
        for g in &mut grids {
            g.metrics_note.clone_from(&metrics_note);
        }
        Ok(grids)
    }
}
