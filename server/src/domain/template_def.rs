//! Template definitions as admins write them (YAML, or JSON, which is YAML too), checked with
//! the line of every mistake: "line 14: params[1].default: must be a whole number".

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::domain::template::TemplateVersion;
use app::model::domain::{ParamKind, ParamSpec, GPUS_PER_NODE};

/// Longest max runtime a launch may ask for: 14 days.
pub const MAX_RUNTIME_LIMIT_S: u64 = 14 * 24 * 3600;
/// Shortest: one minute.
pub const MIN_RUNTIME_S: u64 = 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamDef {
    name: Spanned<String>,
    label: Option<String>,
    kind: Spanned<ParamKind>,
    default: Spanned<serde_json::Value>,
    min: Option<Spanned<f64>>,
    max: Option<Spanned<f64>>,
    #[serde(default)]
    help: String,
    #[serde(default)]
    advanced: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateDef {
    name: Spanned<String>,
    display_name: Spanned<String>,
    family: String,
    model_size: String,
    method: String,
    #[serde(default)]
    description: String,
    default_pool: Spanned<String>,
    image: Spanned<String>,
    command: Spanned<Vec<String>>,
    allowed_gpus: Spanned<Vec<u32>>,
    default_gpus: Spanned<u32>,
    default_max_runtime_s: Spanned<u64>,
    /// A Kubeflow Trainer `ClusterTrainingRuntime`; absent: the job runs as a JobSet.
    trainer_runtime: Option<Spanned<String>>,
    #[serde(default)]
    params: Vec<ParamDef>,
}

fn at<T>(s: &Spanned<T>, path: &str, why: impl std::fmt::Display) -> String {
    format!("line {}: {path}: {why}", s.referenced.line())
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Parses and checks a definition against the pools (name → GPUs); the first mistake, with
/// its line, is the error.
pub fn parse(text: &str, pools: &[(String, u32)]) -> Result<TemplateVersion, String> {
    let d: TemplateDef = serde_saphyr::from_str(text).map_err(|e| {
        // saphyr's message carries the line and column already
        e.to_string()
            .lines()
            .next()
            .unwrap_or("not a template definition")
            .to_string()
    })?;
    if !dns_label(&d.name.value) {
        return Err(at(&d.name, "name", "lowercase letters, digits, '-' and '.', at most 63, starting and ending with a letter or digit"));
    }
    if d.display_name.value.trim().is_empty() {
        return Err(at(&d.display_name, "display_name", "must not be empty"));
    }
    if d.image.value.trim().is_empty() || d.image.value.contains(char::is_whitespace) {
        return Err(at(
            &d.image,
            "image",
            "an image reference without spaces, e.g. registry.internal/ml/trainer:1.0",
        ));
    }
    if d.command.value.is_empty() || d.command.value[0].trim().is_empty() {
        return Err(at(
            &d.command,
            "command",
            "must name the program to run, e.g. [torchrun, train.py]",
        ));
    }
    let Some(&(_, pool_gpus)) = pools.iter().find(|(p, _)| *p == d.default_pool.value) else {
        let known: Vec<&str> = pools.iter().map(|(p, _)| p.as_str()).collect();
        return Err(at(
            &d.default_pool,
            "default_pool",
            format!(
                "no pool '{}'; pools: {}",
                d.default_pool.value,
                known.join(", ")
            ),
        ));
    };
    let gpus = &d.allowed_gpus.value;
    if gpus.is_empty() {
        return Err(at(
            &d.allowed_gpus,
            "allowed_gpus",
            "list at least one GPU count",
        ));
    }
    for (i, &g) in gpus.iter().enumerate() {
        if g == 0 || g > pool_gpus {
            return Err(at(
                &d.allowed_gpus,
                &format!("allowed_gpus[{i}]"),
                format!(
                    "{g} is not 1 to {pool_gpus} (the GPUs of {})",
                    d.default_pool.value
                ),
            ));
        }
        if g > GPUS_PER_NODE && g % GPUS_PER_NODE != 0 {
            return Err(at(
                &d.allowed_gpus,
                &format!("allowed_gpus[{i}]"),
                format!("{g}: above one node, gangs take whole nodes of {GPUS_PER_NODE} GPUs"),
            ));
        }
        if gpus[..i].contains(&g) {
            return Err(at(
                &d.allowed_gpus,
                &format!("allowed_gpus[{i}]"),
                format!("{g} is listed twice"),
            ));
        }
    }
    if !gpus.contains(&d.default_gpus.value) {
        return Err(at(
            &d.default_gpus,
            "default_gpus",
            format!(
                "{} is not one of allowed_gpus {:?}",
                d.default_gpus.value, gpus
            ),
        ));
    }
    let rt = d.default_max_runtime_s.value;
    if !(MIN_RUNTIME_S..=MAX_RUNTIME_LIMIT_S).contains(&rt) {
        return Err(at(
            &d.default_max_runtime_s,
            "default_max_runtime_s",
            format!("{rt} s is not {MIN_RUNTIME_S} s to {MAX_RUNTIME_LIMIT_S} s (14 days)"),
        ));
    }
    if let Some(r) = &d.trainer_runtime {
        if !dns_label(&r.value) {
            return Err(at(
                r,
                "trainer_runtime",
                "the name of a ClusterTrainingRuntime (lowercase letters, digits, '-')",
            ));
        }
    }
    let mut params = Vec::new();
    for (i, p) in d.params.iter().enumerate() {
        let path = |f: &str| format!("params[{i}].{f}");
        let name = &p.name.value;
        let ident = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ident {
            return Err(at(
                &p.name,
                &path("name"),
                "lowercase letters, digits and '_', starting with a letter",
            ));
        }
        if d.params[..i].iter().any(|q| q.name.value == *name) {
            return Err(at(
                &p.name,
                &path("name"),
                format!("'{name}' is defined twice"),
            ));
        }
        let numeric = matches!(p.kind.value, ParamKind::Int | ParamKind::Float);
        for (bound, label) in [(&p.min, "min"), (&p.max, "max")] {
            if let Some(b) = bound {
                if !numeric {
                    return Err(at(
                        b,
                        &path(label),
                        "only int and float parameters have bounds",
                    ));
                }
                if !b.value.is_finite() {
                    return Err(at(b, &path(label), "must be a finite number"));
                }
            }
        }
        if let (Some(lo), Some(hi)) = (&p.min, &p.max) {
            if lo.value > hi.value {
                return Err(at(
                    hi,
                    &path("max"),
                    format!("{} is below min {}", hi.value, lo.value),
                ));
            }
        }
        let spec = ParamSpec {
            name: name.clone(),
            label: p.label.clone().unwrap_or_else(|| name.replace('_', " ")),
            kind: p.kind.value,
            default: Value::Null,
            min: p.min.as_ref().map(|b| b.value),
            max: p.max.as_ref().map(|b| b.value),
            help: p.help.clone(),
            advanced: p.advanced,
        };
        let default = spec
            .check(&p.default.value)
            .map_err(|why| at(&p.default, &path("default"), why))?;
        params.push(ParamSpec { default, ..spec });
    }
    Ok(TemplateVersion {
        name: d.name.value,
        version: 1,
        display_name: d.display_name.value,
        family: d.family,
        model_size: d.model_size,
        method: d.method,
        description: d.description,
        image: d.image.value,
        command: d.command.value,
        params,
        allowed_gpus: d.allowed_gpus.value,
        default_gpus: d.default_gpus.value,
        default_pool: d.default_pool.value,
        default_max_runtime_s: rt,
        trainer_runtime: d.trainer_runtime.map(|r| r.value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
name: gpt-neox-20b
display_name: GPT-NeoX 20B fine-tune
family: GPT-NeoX
model_size: 20B
method: Full fine-tune
description: Full fine-tune with DeepSpeed.
default_pool: hgx-h100
image: registry.internal/ml/neox:2026.11
command: [torchrun, train.py]
allowed_gpus: [8, 16, 32]
default_gpus: 16
default_max_runtime_s: 28800
params:
  - name: learning_rate
    kind: float
    default: 0.0001
    min: 0.0000001
    max: 0.01
  - name: epochs
    kind: int
    default: 3
    min: 1
    max: 50
  - name: dataset
    kind: path
    default: s3://ml-datasets/pile/
";

    fn pools() -> Vec<(String, u32)> {
        vec![("hgx-h100".into(), 128), ("hgx-h200".into(), 32)]
    }

    #[test]
    fn a_good_definition_parses() {
        let t = parse(GOOD, &pools()).expect("valid");
        assert_eq!(t.name, "gpt-neox-20b");
        assert_eq!(t.allowed_gpus, vec![8, 16, 32]);
        assert_eq!(t.params.len(), 3);
        assert_eq!(t.params[1].default, serde_json::json!(3));
        assert_eq!(t.params[0].label, "learning rate");
        assert_eq!(t.trainer_runtime, None);
    }

    /// Each mistake is refused with its line and what is accepted.
    #[test]
    fn mistakes_are_refused_with_their_line_and_reason() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "name: gpt-neox-20b",
                "name: GPT NeoX",
                "line 1: name: lowercase",
            ),
            (
                "default_pool: hgx-h100",
                "default_pool: tpu-v5",
                "line 7: default_pool: no pool 'tpu-v5'; pools: hgx-h100, hgx-h200",
            ),
            (
                "allowed_gpus: [8, 16, 32]",
                "allowed_gpus: [8, 12, 32]",
                "line 10: allowed_gpus[1]: 12: above one node",
            ),
            (
                "allowed_gpus: [8, 16, 32]",
                "allowed_gpus: [8, 16, 256]",
                "line 10: allowed_gpus[2]: 256 is not 1 to 128",
            ),
            (
                "default_gpus: 16",
                "default_gpus: 4",
                "line 11: default_gpus: 4 is not one of allowed_gpus [8, 16, 32]",
            ),
            (
                "default_max_runtime_s: 28800",
                "default_max_runtime_s: 10",
                "line 12: default_max_runtime_s: 10 s is not 60 s",
            ),
            (
                "    default: 3\n",
                "    default: three\n",
                "line 21: params[1].default: must be a whole number",
            ),
            (
                "    min: 1\n    max: 50",
                "    min: 10\n    max: 5",
                "line 23: params[1].max: 5 is below min 10",
            ),
            (
                "  - name: dataset\n    kind: path",
                "  - name: dataset\n    kind: path\n    min: 1",
                "line 26: params[2].min: only int and float parameters have bounds",
            ),
            (
                "  - name: epochs",
                "  - name: learning_rate",
                "line 19: params[1].name: 'learning_rate' is defined twice",
            ),
            ("    kind: int", "    kind: integer", "line 20"),
            (
                "command: [torchrun, train.py]",
                "command: []",
                "line 9: command: must name the program",
            ),
            (
                "family: GPT-NeoX",
                "family: GPT-NeoX\ncolour: blue",
                "colour",
            ),
        ];
        for (from, to, expected) in cases {
            assert!(GOOD.contains(from), "fixture lacks {from:?}");
            let text = GOOD.replacen(from, to, 1);
            let err = parse(&text, &pools()).expect_err(to);
            assert!(
                err.contains(expected),
                "{to:?}: expected {expected:?} in {err:?}"
            );
        }
        assert!(parse("name: [unclosed", &pools())
            .unwrap_err()
            .contains("line 1"));
    }
}
