//! The server's layering, checked on its source: http → service → {db, cluster, metrics,
//! domain}; db, cluster and metrics → domain only; workers may use service and what is below
//! it; nothing below service imports service, http or start-up; no cycle between modules.
//!
//! Every `use crate::…` (groups expanded) and every `crate::x::` path in the code of
//! `server/src` (tests left out: `tests.rs`, `testkit.rs` and `#[cfg(test)] mod tests`) is an
//! edge from the file's top-level module to the one it names. An edge the rule forbids fails
//! the test, naming the file, the line and the import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// Start-up and the command line: wires everything, may import anything.
    Wiring,
    /// Background tasks that keep the database in step with the cluster and the metrics.
    Workers,
    /// Routes, extractors, middleware, the serve loop.
    Http,
    /// The operations, each with its permission checks.
    Service,
    Db,
    Cluster,
    Metrics,
    /// Plain types and pure functions (and the leaves: configuration types, the clock, input
    /// checks).
    Domain,
}

/// Every top-level module of `server/src` and its layer. A new module must be placed here.
const MODULES: &[(&str, Layer)] = &[
    ("main", Layer::Wiring),
    ("lib", Layer::Wiring),
    ("startup", Layer::Wiring),
    ("render", Layer::Wiring),
    ("seed", Layer::Wiring),
    ("workers", Layer::Workers),
    ("http", Layer::Http),
    ("service", Layer::Service),
    // The services' own error and its mapping to the wire error.
    ("error", Layer::Service),
    // The request a service call runs for (its id, its client's address).
    ("context", Layer::Service),
    ("usage", Layer::Service),
    ("whatif", Layer::Service),
    ("db", Layer::Db),
    ("cluster", Layer::Cluster),
    ("metrics", Layer::Metrics),
    ("domain", Layer::Domain),
    ("config", Layer::Domain),
    ("clock", Layer::Domain),
    // Checks of text at the edge (control characters, one line), answering with the wire error.
    ("input", Layer::Service),
];

/// What the layers below the services may use of the app crate: its plain domain values
/// (`app::model::domain`: job states, priorities, roles, parameter specs, the node size) and
/// its text formatting. The wire types (`app::model::views`) and the wire error are built only
/// by the services.
const APP_FOR_LOWER_LAYERS: &[&str] = &["app::model::domain::", "app::format::"];

/// Lower-layer uses of wire types still in the code, each with why it is not yet gone. The test
/// fails on any other, and on an entry here that no longer occurs, so this list only shrinks.
const WIRE_TYPES_BELOW_SERVICES: &[(&str, &str, &str)] = &[];

fn may_import(from: Layer, to: Layer) -> bool {
    use Layer::*;
    from == to
        || to == Domain
        || match from {
            Wiring => true,
            Workers => matches!(to, Service | Db | Cluster | Metrics),
            Http => matches!(to, Service),
            Service => matches!(to, Db | Cluster | Metrics),
            Db | Cluster | Metrics | Domain => false,
        }
}

#[derive(Debug, Clone)]
struct Edge {
    file: String,
    line: usize,
    from: String,
    to: String,
    path: String,
}

/// The code of a file without its tests and comments, line by line (line numbers kept).
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let n = next.trim();
                if n.starts_with("mod ") || n.starts_with("pub mod ") {
                    // `#[cfg(test)] mod tests;` or an inline test module running to its close.
                    if n.ends_with('{') {
                        let mut depth = 0i32;
                        for l in lines.by_ref() {
                            out.push(String::new());
                            depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                            if depth == 0 {
                                break;
                            }
                        }
                        out.push(String::new());
                        continue;
                    }
                }
            }
        }
        let code = if t.starts_with("//") {
            ""
        } else {
            match line.find(" // ") {
                Some(i) => &line[..i],
                None => line,
            }
        };
        out.push(code.to_string());
    }
    out
}

/// The top-level modules named by `crate::` paths in one statement or line: `crate::a::X`,
/// `crate::{a::X, b::{Y, Z}}`.
fn crate_targets(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // Not `$crate::` nor part of a longer name (`mycrate::`).
        let before = rest[..i].chars().last();
        let after = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            rest = after;
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // A group: every top-level name in it.
            let mut depth = 1;
            let mut item = String::new();
            let mut end = group.len();
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k;
                            break;
                        }
                    }
                    _ => {}
                }
                if depth == 1 && c == ',' {
                    item.push('\u{1}');
                } else {
                    item.push(c);
                }
            }
            for part in item.split('\u{1}') {
                let part = part.trim();
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "self" {
                    out.push((name, format!("crate::{part}")));
                }
            }
            rest = &group[end.min(group.len())..];
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let path: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !name.is_empty() {
                out.push((name, format!("crate::{path}")));
            }
            rest = after;
        }
    }
    out
}

/// The top-level module a file belongs to: `api.rs` → api, `service/jobs.rs` → service.
fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().unwrap().to_string_lossy();
    name == "tests.rs" || name == "testkit.rs" || rel.components().any(|c| c.as_os_str() == "tests")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every edge of a source tree (`src` with its files as `(relative path, text)`).
fn edges(files: &[(PathBuf, String)]) -> Vec<Edge> {
    let mut out = Vec::new();
    for (rel, text) in files {
        if is_test_file(rel) {
            continue;
        }
        let from = module_of(rel);
        // A `use` may span lines: join each statement from `use` to its `;`.
        let lines = code_lines(text);
        let mut k = 0;
        while k < lines.len() {
            let line = &lines[k];
            let start = k;
            let mut stmt = line.clone();
            let t = line.trim_start();
            if (t.starts_with("use ")
                || t.starts_with("pub use ")
                || t.starts_with("pub(crate) use "))
                && !t.contains(';')
            {
                while k + 1 < lines.len() && !stmt.contains(';') {
                    k += 1;
                    stmt.push_str(&lines[k]);
                }
            }
            for (to, path) in crate_targets(&stmt) {
                if to != from {
                    out.push(Edge {
                        file: format!("server/src/{}", rel.display()),
                        line: start + 1,
                        from: from.clone(),
                        to,
                        path,
                    });
                }
            }
            k += 1;
        }
    }
    out
}

fn layer(module: &str) -> Option<Layer> {
    MODULES.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// What is wrong with a tree's edges: forbidden edges, unplaced modules, cycles.
fn problems(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let modules: BTreeSet<String> = files.iter().map(|(p, _)| module_of(p)).collect();
    for m in &modules {
        if m != "testkit" && layer(m).is_none() {
            problems.push(format!(
                "server/src/{m}: a module with no layer; place it in MODULES (tests/layers.rs)"
            ));
        }
    }
    // Routes reach the database and the cluster only through the services: no `.db()` or
    // `.cluster()` on the portal in `http` code.
    for (rel, text) in files {
        if is_test_file(rel) || layer(&module_of(rel)) != Some(Layer::Http) {
            continue;
        }
        for (k, line) in code_lines(text).iter().enumerate() {
            for reach in [".db()", ".db.", ".cluster()", ".cluster."] {
                if line.contains(&format!("portal{reach}")) {
                    problems.push(format!(
                        "server/src/{}:{}: `{}` reaches past the services (`portal{reach}`)",
                        rel.display(),
                        k + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    // Below the services, only the app's domain values.
    let mut remainder_seen = BTreeSet::new();
    for (rel, text) in files {
        let Some(l) = layer(&module_of(rel)) else {
            continue;
        };
        if is_test_file(rel)
            || !matches!(
                l,
                Layer::Db | Layer::Cluster | Layer::Metrics | Layer::Domain
            )
        {
            continue;
        }
        let file = format!("server/src/{}", rel.display());
        for (k, line) in code_lines(text).iter().enumerate() {
            let mut rest = line.as_str();
            while let Some(i) = rest.find("app::") {
                let before = rest[..i].chars().last();
                let path: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || "_:{}, ".contains(*c))
                    .collect();
                rest = &rest[i + 5..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let path = path.trim_end_matches([',', ' ', ';']).to_string();
                if APP_FOR_LOWER_LAYERS.iter().any(|p| path.starts_with(p)) {
                    continue;
                }
                match WIRE_TYPES_BELOW_SERVICES
                    .iter()
                    .find(|(f, p, _)| *f == file && path.starts_with(p))
                {
                    Some((f, p, _)) => {
                        remainder_seen.insert((*f, *p));
                    }
                    None => problems.push(format!(
                        "{file}:{}: `{path}`: below the services only {APP_FOR_LOWER_LAYERS:?} of the app crate",
                        k + 1
                    )),
                }
            }
        }
    }
    if files.iter().any(|(p, _)| p == Path::new("lib.rs")) {
        for (f, p, why) in WIRE_TYPES_BELOW_SERVICES {
            if !remainder_seen.contains(&(*f, *p)) {
                problems.push(format!(
                    "{f}: `{p}` ({why}) is gone: take it off WIRE_TYPES_BELOW_SERVICES"
                ));
            }
        }
    }
    let all = edges(files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in &all {
        graph
            .entry(e.from.clone())
            .or_default()
            .insert(e.to.clone());
        let (Some(a), Some(b)) = (layer(&e.from), layer(&e.to)) else {
            if layer(&e.to).is_none() && layer(&e.from).is_some() {
                problems.push(format!(
                    "{}:{}: `{}` names `{}`, not a module of the table (tests/layers.rs)",
                    e.file, e.line, e.from, e.path
                ));
            }
            continue;
        };
        if !may_import(a, b) {
            problems.push(format!(
                "{}:{}: `{}` ({:?}) imports `{}` ({:?}), which the rule forbids",
                e.file, e.line, e.from, a, e.path, b
            ));
        }
    }
    // Cycles between modules: a module that reaches itself.
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((m, path)) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if next == start {
                    let cycle = format!("{} -> {start}", path.join(" -> "));
                    // Report each cycle once, from its smallest module.
                    if path.iter().all(|p| p >= start) {
                        problems.push(format!("cycle between modules: {cycle}"));
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    problems
}

fn source_tree() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(&src).unwrap().to_path_buf(), text)
        })
        .collect()
}

#[test]
fn the_server_keeps_its_layers() {
    let tree = source_tree();
    assert!(
        edges(&tree).len() > 50,
        "the checker found almost no imports: is it reading server/src?"
    );
    let problems = problems(&tree);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The checker itself: a forbidden import, a cycle and an unplaced module are each found,
/// and a test module's imports are not edges.
#[test]
fn the_checker_finds_a_forbidden_edge_a_cycle_and_a_stray_module() {
    let tree = |files: &[(&str, &str)]| -> Vec<(PathBuf, String)> {
        files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    };
    let clean = tree(&[
        ("http/api.rs", "use crate::service::Portal;\n"),
        ("service/jobs.rs", "use crate::{db::Db, cluster::{Cluster, WorkloadSpec}};\n"),
        (
            "db/mod.rs",
            "use crate::domain::quota::QuotaSpec;\n#[cfg(test)]\nmod tests {\n    use crate::service::Portal;\n}\n",
        ),
        ("domain/mod.rs", "pub mod quota;\n"),
    ]);
    assert_eq!(problems(&clean), Vec::<String>::new());

    let forbidden = tree(&[
        ("service.rs", "use crate::db::Db;\n"),
        (
            "db/mod.rs",
            "use std::fmt;\n\nfn f(_: &crate::service::Portal) {}\n",
        ),
    ]);
    let p = problems(&forbidden);
    assert!(
        p.iter()
            .any(|p| p
                .starts_with("server/src/db/mod.rs:3: `db` (Db) imports `crate::service::Portal`")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|p| p.starts_with("cycle between modules: db -> service -> db")),
        "{p:#?}"
    );

    let group = tree(&[(
        "cluster/sim.rs",
        "use crate::{\n    clock::Clock,\n    http::{ApiFailure, routes},\n};\n",
    )]);
    let p = problems(&group);
    assert!(
        p.iter().any(|p| p.contains("server/src/cluster/sim.rs:1: `cluster` (Cluster) imports `crate::http::{ApiFailure, routes}`")),
        "{p:#?}"
    );
    assert_eq!(p.len(), 1, "{p:#?}");

    let past = tree(&[(
        "http/api.rs",
        "async fn readyz(state: AppState) {\n    state.portal.db().ping().await;\n}\n",
    )]);
    assert!(
        problems(&past)[0].starts_with(
            "server/src/http/api.rs:2: `state.portal.db().ping().await;` reaches past the services"
        ),
        "{:#?}",
        problems(&past)
    );

    let wire = tree(&[(
        "cluster/sim.rs",
        "use app::model::domain::Priority;\nuse app::model::{Job, JobState};\n",
    )]);
    let p = problems(&wire);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(
        p[0].starts_with("server/src/cluster/sim.rs:2: `app::model::{Job, JobState}`"),
        "{p:#?}"
    );

    let stray = tree(&[("gadgets.rs", "")]);
    assert!(problems(&stray)[0].contains("gadgets: a module with no layer"));
}
