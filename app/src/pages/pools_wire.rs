//! How the Pools page's grids travel inside the page, for hydration.
//!
//! As plain JSON each of a pool's GPUs carried its job's name and id and the three field
//! names: the demo's 160 GPUs were 13 KB of the page, and writing them (serializing, then
//! escaping them into the page's script) was about 6 % of what the server spent on the page
//! (perf over the page benchmark). Here each pool names the jobs on it once, and a GPU is an
//! array of the index of its job in that list and its utilization. Nothing is dropped or
//! rounded: the page reads back the grids the server had (the tests below), so the hydrated
//! view is the one the server wrote. (A reading comes back to within a unit in its last
//! place: serde_json's default reading of a float, as for every resource in the page; the
//! grid shows whole percents.) Quotes are swapped as
//! [`crate::wire::SwappedJson`] has them. Fetches after the page has loaded go through the
//! server function as before; the API is unchanged.

use leptos::server::codee::{Decoder, Encoder};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::model::{GridCell, GridNode, PoolGrid};
use crate::wire::{from_swapped, to_swapped};

/// A GPU: the index of its job in its pool's list (none when free), and its utilization.
#[derive(Serialize, Deserialize)]
struct Cell(Option<u32>, Option<f64>);

/// A job on a pool: its name (or "another team") and its id when the viewer may open it.
#[derive(Serialize, Deserialize, PartialEq)]
struct Held<S>(Option<S>, Option<S>);

/// A pool: name, GPU model, the note on its metrics, the jobs on it, and each node's name and
/// GPUs.
#[derive(Serialize, Deserialize)]
struct Grid<S> {
    pool: S,
    gpu_model: S,
    metrics_note: Option<S>,
    jobs: Vec<Held<S>>,
    nodes: Vec<(S, Vec<Cell>)>,
}

#[derive(Serialize)]
enum Out<'a> {
    Ok(Vec<Grid<&'a str>>),
    Err(&'a ApiError),
}

#[derive(Deserialize)]
enum In {
    Ok(Vec<Grid<String>>),
    Err(ApiError),
}

fn grid_out(g: &PoolGrid) -> Grid<&str> {
    let mut jobs: Vec<Held<&str>> = Vec::new();
    let nodes = g
        .nodes
        .iter()
        .map(|n| {
            let cells = n
                .cells
                .iter()
                .map(|c| {
                    let held = Held(c.job.as_deref(), c.job_id.as_deref());
                    // A free GPU has neither; anything else is a job on the list (a job holds
                    // whole nodes, so the last one listed is nearly always the one).
                    let index = (held != Held(None, None)).then(|| {
                        match jobs.iter().rposition(|j| *j == held) {
                            Some(i) => i,
                            None => {
                                jobs.push(held);
                                jobs.len() - 1
                            }
                        }
                    });
                    Cell(index.map(|i| i as u32), c.util_pct)
                })
                .collect();
            (n.name.as_str(), cells)
        })
        .collect();
    Grid {
        pool: &g.pool,
        gpu_model: &g.gpu_model,
        metrics_note: g.metrics_note.as_deref(),
        jobs,
        nodes,
    }
}

fn grid_in(g: Grid<String>) -> Result<PoolGrid, String> {
    let nodes = g
        .nodes
        .into_iter()
        .map(|(name, cells)| {
            let cells = cells
                .into_iter()
                .map(|Cell(index, util_pct)| {
                    let (job, job_id) = match index {
                        None => (None, None),
                        Some(i) => match g.jobs.get(i as usize) {
                            Some(Held(job, id)) => (job.clone(), id.clone()),
                            None => return Err(format!("no job {i} on pool {}", g.pool)),
                        },
                    };
                    Ok(GridCell {
                        job,
                        job_id,
                        util_pct,
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok(GridNode { name, cells })
        })
        .collect::<Result<_, String>>()?;
    Ok(PoolGrid {
        pool: g.pool,
        gpu_model: g.gpu_model,
        nodes,
        metrics_note: g.metrics_note,
    })
}

/// The Pools page grids' codec (see the module's documentation).
pub struct PoolGridsCodec;

impl Encoder<Result<Vec<PoolGrid>, ApiError>> for PoolGridsCodec {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(val: &Result<Vec<PoolGrid>, ApiError>) -> Result<String, serde_json::Error> {
        let out = match val {
            Ok(grids) => Out::Ok(grids.iter().map(grid_out).collect()),
            Err(e) => Out::Err(e),
        };
        to_swapped(&out)
    }
}

impl Decoder<Result<Vec<PoolGrid>, ApiError>> for PoolGridsCodec {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(val: &str) -> Result<Result<Vec<PoolGrid>, ApiError>, serde_json::Error> {
        Ok(match from_swapped::<In>(val)? {
            In::Ok(grids) => Ok(grids
                .into_iter()
                .map(grid_in)
                .collect::<Result<_, _>>()
                .map_err(<serde_json::Error as serde::de::Error>::custom)?),
            In::Err(e) => Err(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::pages::pools::tests::cell;

    /// As the page carries it: Leptos replaces `<` with `\u003c` and writes the result with
    /// `{:?}` as a JavaScript string literal, which the browser reads and hands to the decoder.
    fn through_the_page(val: &Result<Vec<PoolGrid>, ApiError>) -> Result<Vec<PoolGrid>, ApiError> {
        let encoded = PoolGridsCodec::encode(val).unwrap();
        let literal = format!("{:?}", encoded.replace('<', "\\u003c"));
        let read: String = serde_json::from_str(&literal).unwrap();
        PoolGridsCodec::decode(&read).unwrap()
    }

    /// `got` and `want` alike, but for readings within a unit in their last place.
    fn assert_same(got: &Result<Vec<PoolGrid>, ApiError>, want: &Result<Vec<PoolGrid>, ApiError>) {
        let readings = |r: &Result<Vec<PoolGrid>, ApiError>| -> Vec<Option<f64>> {
            r.iter()
                .flatten()
                .flat_map(|g| &g.nodes)
                .flat_map(|n| &n.cells)
                .map(|c| c.util_pct)
                .collect()
        };
        let (a, b) = (readings(got), readings(want));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            match (x, y) {
                (Some(x), Some(y)) => {
                    assert!((x - y).abs() <= y.abs() * f64::EPSILON, "{x} vs {y}")
                }
                _ => assert_eq!(x, y),
            }
        }
        // The rest exactly: each reading set to the one sent.
        let mut got = got.clone();
        let mut it = b.into_iter();
        for c in got
            .iter_mut()
            .flatten()
            .flat_map(|g| &mut g.nodes)
            .flat_map(|n| &mut n.cells)
        {
            c.util_pct = it.next().unwrap();
        }
        assert_eq!(&got, want);
    }

    /// Every GPU comes back as it went: free, the viewer's job (name and id), another team's
    /// (a name, no id), the same job again after another, a reading or none; names with
    /// quotes, apostrophes and markup; a pool's note.
    #[test]
    fn the_grids_come_back_as_they_went() {
        let grids = vec![
            PoolGrid {
                pool: "hgx-h100".into(),
                gpu_model: "NVIDIA H100 80GB".into(),
                nodes: vec![
                    GridNode {
                        name: "hgx-h100-node-00".into(),
                        cells: vec![
                            cell(Some("llama"), Some("id-1"), Some(35.80738388534174)),
                            cell(Some("llama"), Some("id-1"), Some(0.1 + 0.2)),
                            cell(Some("another team"), None, Some(99.99999999999999)),
                            cell(None, None, None),
                            cell(Some("another team"), None, None),
                            cell(Some("llama"), Some("id-1"), Some(0.0)),
                            cell(
                                Some("<b>'x'</b> & \"y\""),
                                Some("id-2"),
                                Some(f64::MIN_POSITIVE),
                            ),
                            cell(None, None, Some(12.5)),
                        ],
                    },
                    GridNode {
                        name: "hgx-h100-node-01".into(),
                        cells: vec![cell(Some("llama"), Some("id-1"), Some(1e-300))],
                    },
                ],
                metrics_note: None,
            },
            PoolGrid {
                pool: "pool's \"b\"".into(),
                gpu_model: "H200".into(),
                nodes: vec![],
                metrics_note: Some("metrics unavailable: timed out (08:00 UTC)".into()),
            },
        ];
        let sent = Ok(grids);
        assert_same(&through_the_page(&sent), &sent);
        let failed = Err(ApiError::new(ErrorCode::Internal, "it's down"));
        assert_eq!(through_the_page(&failed), failed);
    }

    /// A pool's jobs are named once, not once a GPU: the demo's grid was 13 KB this way.
    #[test]
    fn a_job_is_named_once_per_pool() {
        let node = |n: &str, id: &str| GridNode {
            name: n.into(),
            cells: (0..8)
                .map(|_| cell(Some("qwen2.5-72b-zero3-01dbea"), Some(id), Some(35.0)))
                .collect(),
        };
        let grids = Ok(vec![PoolGrid {
            pool: "p".into(),
            gpu_model: "m".into(),
            nodes: vec![node("n0", "id-a"), node("n1", "id-a"), node("n2", "id-b")],
            metrics_note: None,
        }]);
        let encoded = PoolGridsCodec::encode(&grids).unwrap();
        assert_eq!(encoded.matches("qwen2.5").count(), 2, "{encoded}");
        assert_eq!(encoded.matches("id-a").count(), 1, "{encoded}");
        assert_same(&through_the_page(&grids), &grids);
        // A job index past the list is an error, not a GPU made up.
        let bad = encoded.replace("[1,35.0]", "[7,35.0]");
        assert_ne!(bad, encoded);
        assert!(PoolGridsCodec::decode(&bad).is_err());
    }
}
