//! `cargo xtask layers`: checks the dependency rules of house-style.md ("Layout", "Dependency direction") against
//! the dependencies each workspace member declares, as `cargo metadata --no-deps` reports them.
//!
//! The rules are a table of layers below plus [`check`], a pure function over parsed metadata, so that each rule is
//! unit-tested on synthetic graphs. A new workspace crate must be given a layer here before the check passes: where a
//! crate sits in the architecture is a decision to write down, not a default.
//! deny.toml's `wrappers` enforce the vendor rule on the resolved graph as well; this check gives the clearer message.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::shell;

const CORE: &str = "ragtune-core";
const FACADE: &str = "ragtune";
const TESTKIT: &str = "ragtune-testkit";
/// The evaluation crate: it measures the engine through the facade, and the engine never depends on it.
const EVAL: &str = "ragtune-eval";
/// The only crates that may depend on the evaluation crate: the command-line tool (`ragtune eval`,
/// `ragtune calibrate`) and the tooling.
const EVAL_USERS: &[&str] = &["ragtune-cli", "xtask", "tests", "benches"];
/// Support crates: small, shared by the engine and the task runner, depending on ragtune-core at most and on no
/// runtime or vendor SDK, so that building them never builds the engine (docs/adr/0008-light-provisioning-crate.md).
const SUPPORT: &[&str] = &["ragtune-provision"];
/// The crates of ours xtask may depend on: the light ones. It reaches the engine through the `ragtune` binary, so
/// `cargo xtask layers` and CI's own steps do not wait for the engine to build.
const XTASK_MAY_USE: &[&str] = &[CORE, "ragtune-provision", TESTKIT];

/// The middle crates: each implements core's seams and meets the others only through core's traits.
const MIDDLE: &[&str] = &[
    "ragtune-ingest",
    "ragtune-embed",
    "ragtune-store",
    "ragtune-llm",
    "ragtune-web",
    "ragtune-retrieve",
    "ragtune-evaluators",
    "ragtune-rerank",
];

/// The user-facing programs; they reach the layers through the facade.
const SURFACES: &[&str] = &["ragtune-cli", "ragtune-server"];

/// Workspace members that never ship: the task runner, integration tests and benchmarks.
const TOOLING: &[&str] = &["xtask", "tests", "benches"];

/// Runtimes and vendor SDKs that core must not depend on: core is the API boundary every fork codes against.
const CORE_FORBIDDEN: &[&str] = &["tokio", "reqwest", "ort", "fastembed", "qdrant-client", "hyper", "tonic", "axum"];

/// Vendor SDKs and the only crates that may use them.
const VENDORS: &[(&str, &[&str])] = &[
    ("fastembed", &["ragtune-embed"]),
    ("ort", &["ragtune-embed"]),
    ("qdrant-client", &["ragtune-store"]),
    ("reqwest", &["ragtune-llm", "ragtune-web", "ragtune-store"]),
];

const DIRECTION: &str = "(house-style.md, Dependency direction)";
const LAYOUT: &str = "(house-style.md, Layout)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Core,
    Middle,
    Facade,
    Eval,
    Support,
    Surface,
    Testkit,
    Tooling,
}

fn layer_of(name: &str) -> Option<Layer> {
    match name {
        CORE => Some(Layer::Core),
        FACADE => Some(Layer::Facade),
        EVAL => Some(Layer::Eval),
        TESTKIT => Some(Layer::Testkit),
        _ if MIDDLE.contains(&name) => Some(Layer::Middle),
        _ if SUPPORT.contains(&name) => Some(Layer::Support),
        _ if SURFACES.contains(&name) => Some(Layer::Surface),
        _ if TOOLING.contains(&name) => Some(Layer::Tooling),
        _ => None,
    }
}

/// Which manifest table a dependency is declared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Normal,
    Dev,
    Build,
}

/// One declared dependency of a workspace member (the package name, not a rename).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub name: String,
    pub kind: Kind,
}

/// A workspace member and its declared dependencies.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub manifest_path: PathBuf,
    pub dependencies: Vec<Dependency>,
}

/// A broken rule: the crate that breaks it and a message naming the edge and the rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub package: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("`cargo xtask layers` takes no arguments, got {args:?}");
    }
    report(&shell::project_root())
}

/// Checks the workspace at `root` and prints the outcome; fails when any rule is broken.
pub fn report(root: &Path) -> Result<()> {
    let (members, violations) = check_workspace(root)?;
    if violations.is_empty() {
        println!("layers: {members} workspace crates follow the dependency rules of house-style.md");
        return Ok(());
    }
    for violation in &violations {
        eprintln!("layers: {violation}");
    }
    bail!("{} layer violation(s) in the workspace dependency graph", violations.len())
}

/// Runs `cargo metadata --no-deps` on the workspace at `root`, reads each member's manifest, and returns the number
/// of members and every violation, sorted.
pub fn check_workspace(root: &Path) -> Result<(usize, Vec<Violation>)> {
    let metadata = cargo_metadata(root)?;
    let packages = parse(&metadata)?;
    let mut violations = check(&packages);
    for package in &packages {
        let manifest = std::fs::read_to_string(&package.manifest_path)
            .with_context(|| format!("cannot read {}", package.manifest_path.display()))?;
        violations.extend(check_lints(&package.name, &manifest));
    }
    violations.sort();
    violations.dedup();
    Ok((packages.len(), violations))
}

fn cargo_metadata(root: &Path) -> Result<Value> {
    let mut cmd = std::process::Command::new(shell::cargo());
    cmd.current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps", "--manifest-path"])
        .arg(root.join("Cargo.toml"));
    let shown = shell::display(&cmd);
    let output = cmd.output().with_context(|| format!("cannot start `{shown}`"))?;
    if !output.status.success() {
        bail!("`{shown}` failed ({}):\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).with_context(|| format!("`{shown}` printed invalid JSON"))
}

/// The workspace members of `cargo metadata` output, with their declared dependencies.
///
/// # Errors
///
/// When the JSON lacks the fields that `cargo metadata --format-version 1` always prints.
pub fn parse(metadata: &Value) -> Result<Vec<Package>> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .context("metadata has no `workspace_members` array")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages = metadata["packages"].as_array().context("metadata has no `packages` array")?;
    let mut parsed = Vec::new();
    for package in packages {
        let id = package["id"].as_str().context("a package has no `id`")?;
        if !members.contains(id) {
            continue;
        }
        let name = package["name"].as_str().with_context(|| format!("package {id} has no `name`"))?;
        let manifest_path =
            package["manifest_path"].as_str().with_context(|| format!("package {name} has no `manifest_path`"))?;
        let dependencies = package["dependencies"]
            .as_array()
            .with_context(|| format!("package {name} has no `dependencies` array"))?
            .iter()
            .map(|dependency| {
                let dep_name =
                    dependency["name"].as_str().with_context(|| format!("a dependency of {name} has no `name`"))?;
                let kind = match dependency["kind"].as_str() {
                    None => Kind::Normal,
                    Some("dev") => Kind::Dev,
                    Some("build") => Kind::Build,
                    Some(other) => bail!("dependency {dep_name} of {name} has unknown kind `{other}`"),
                };
                Ok(Dependency { name: dep_name.to_owned(), kind })
            })
            .collect::<Result<_>>()?;
        parsed.push(Package { name: name.to_owned(), manifest_path: manifest_path.into(), dependencies });
    }
    Ok(parsed)
}

/// Every dependency rule that `packages` break, sorted.
pub fn check(packages: &[Package]) -> Vec<Violation> {
    // Ours: every crate in the layer table, present or not, and every workspace member.
    let ours: BTreeSet<&str> = [CORE, FACADE, EVAL, TESTKIT]
        .iter()
        .chain(MIDDLE)
        .chain(SUPPORT)
        .chain(SURFACES)
        .chain(TOOLING)
        .copied()
        .chain(packages.iter().map(|package| package.name.as_str()))
        .collect();
    let vendors: BTreeMap<&str, &[&str]> = VENDORS.iter().copied().collect();

    let mut violations = Vec::new();
    for package in packages {
        let layer = layer_of(&package.name);
        if layer.is_none() {
            violations.push(Violation {
                package: package.name.clone(),
                message: format!(
                    "{} is a workspace member without a layer: add it to the layer table in xtask/src/layers.rs \
                     and to house-style.md {LAYOUT}",
                    package.name
                ),
            });
        }
        for dependency in &package.dependencies {
            let broken = if ours.contains(dependency.name.as_str()) {
                internal_rule(&package.name, layer, dependency).or_else(|| xtask_rule(&package.name, dependency))
            } else {
                external_rule(&package.name, layer, dependency, &vendors)
            };
            if let Some(rule) = broken {
                violations.push(Violation {
                    package: package.name.clone(),
                    message: format!("{}: {rule} {DIRECTION}", edge(&package.name, dependency)),
                });
            }
        }
    }
    violations.sort();
    violations.dedup();
    violations
}

/// The rule that a dependency on one of our crates breaks, if any.
fn internal_rule(from_name: &str, from: Option<Layer>, dependency: &Dependency) -> Option<String> {
    let to = layer_of(&dependency.name);
    let dev = dependency.kind == Kind::Dev;
    let rule = match (from, to) {
        (Some(Layer::Core), _) => "ragtune-core depends on no crate of ours",
        // Dev-dependencies count too: a facade test that runs an evaluation would tie the engine to its measurement.
        (_, Some(Layer::Eval)) if !EVAL_USERS.contains(&from_name) => {
            "only ragtune-cli and the tooling (xtask, tests, benches) may depend on ragtune-eval: the engine never \
             depends on the code that measures it"
        }
        (Some(Layer::Middle), Some(Layer::Core)) | (Some(Layer::Testkit), Some(Layer::Core)) => return None,
        (Some(Layer::Middle), Some(Layer::Testkit)) if dev => return None,
        // A middle crate's tests may find provisioned model files where `cargo xtask models` put them.
        (Some(Layer::Middle), Some(Layer::Support)) if dev => return None,
        (Some(Layer::Support), Some(Layer::Core)) => return None,
        (Some(Layer::Support), _) => "support crates (ragtune-provision) depend on ragtune-core only",
        (Some(Layer::Middle), _) => {
            "middle crates may depend only on ragtune-core (and on ragtune-testkit as a dev-dependency)"
        }
        (Some(Layer::Testkit), _) => "ragtune-testkit depends on ragtune-core only",
        // The `ragtune` binary hosts both surfaces: `ragtune serve` runs the HTTP server (docs/adr/0010).
        (Some(Layer::Surface), Some(Layer::Surface))
            if from_name == "ragtune-cli" && dependency.name == "ragtune-server" =>
        {
            return None;
        }
        (_, Some(Layer::Surface) | Some(Layer::Tooling)) => {
            "nothing depends on the surfaces (ragtune-cli, ragtune-server) or the tooling (xtask, tests, benches)"
        }
        (_, Some(Layer::Middle)) if from != Some(Layer::Facade) => {
            "only the facade `ragtune` may depend on the middle crates; surfaces and tooling go through the facade"
        }
        (Some(Layer::Tooling), Some(Layer::Testkit)) => return None,
        (_, Some(Layer::Testkit)) if !dev => "ragtune-testkit may only be a dev-dependency: fakes never ship",
        _ => return None,
    };
    Some(rule.to_owned())
}

/// The rule that a dependency of xtask on one of our crates breaks, if any: xtask stays light.
fn xtask_rule(from: &str, dependency: &Dependency) -> Option<String> {
    if from != "xtask" || dependency.kind == Kind::Dev || XTASK_MAY_USE.contains(&dependency.name.as_str()) {
        return None;
    }
    Some(format!(
        "xtask depends only on the light crates of ours ({}); it runs the engine through the `ragtune` binary, so \
         that `cargo xtask layers` and CI's own steps never build the engine (docs/adr/0008)",
        XTASK_MAY_USE.join(", ")
    ))
}

/// The rule that a dependency on a third-party crate breaks, if any.
fn external_rule(
    from: &str,
    layer: Option<Layer>,
    dependency: &Dependency,
    vendors: &BTreeMap<&str, &[&str]>,
) -> Option<String> {
    let name = dependency.name.as_str();
    // Dev-dependencies never reach core's dependents, so a test executor there is fine; the vendor rule below
    // still keeps SDKs out of core's tests.
    if layer == Some(Layer::Core) && dependency.kind != Kind::Dev && CORE_FORBIDDEN.contains(&name) {
        return Some("ragtune-core depends on no runtime or vendor SDK".to_owned());
    }
    if layer == Some(Layer::Support) && dependency.kind != Kind::Dev && CORE_FORBIDDEN.contains(&name) {
        return Some("support crates depend on no runtime or vendor SDK: the task runner builds them".to_owned());
    }
    let allowed = vendors.get(name)?;
    if allowed.contains(&from) {
        return None;
    }
    Some(format!(
        "the vendor SDK {name} may be used only by {} (vendor SDKs stay inside one crate)",
        allowed.join(", ")
    ))
}

fn edge(from: &str, dependency: &Dependency) -> String {
    let kind = match dependency.kind {
        Kind::Normal => "",
        Kind::Dev => " (dev-dependency)",
        Kind::Build => " (build-dependency)",
    };
    format!("{from} depends on {}{kind}", dependency.name)
}

/// A violation when `manifest` does not inherit the workspace lints with `[lints] workspace = true`.
pub fn check_lints(package: &str, manifest: &str) -> Option<Violation> {
    let inherits = match manifest.parse::<toml::Table>() {
        Ok(table) => {
            table.get("lints").and_then(|lints| lints.get("workspace")).and_then(toml::Value::as_bool).unwrap_or(false)
        }
        Err(_) => false,
    };
    (!inherits).then(|| Violation {
        package: package.to_owned(),
        message: format!("{package} does not set `[lints] workspace = true` in its Cargo.toml {LAYOUT}"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Builds `cargo metadata` JSON from `(crate, dependencies)` pairs, where a dependency is `name`, `dev:name`
    /// or `build:name`, runs the check, and compares the rendered violations with `expect`.
    fn check_graph(graph: &[(&str, &[&str])], expect: &[&str]) {
        let packages: Vec<Value> = graph
            .iter()
            .map(|(name, dependencies)| {
                let dependencies: Vec<Value> = dependencies
                    .iter()
                    .map(|dependency| match dependency.split_once(':') {
                        Some((kind, name)) => json!({ "name": name, "kind": kind }),
                        None => json!({ "name": dependency, "kind": null }),
                    })
                    .collect();
                json!({
                    "name": name,
                    "id": format!("path+file:///ws/crates/{name}#0.1.0"),
                    "manifest_path": format!("/ws/crates/{name}/Cargo.toml"),
                    "dependencies": dependencies,
                })
            })
            .collect();
        let members: Vec<&Value> = packages.iter().map(|package| &package["id"]).collect();
        let metadata = json!({ "packages": packages, "workspace_members": members, "version": 1 });

        let parsed = parse(&metadata).expect("synthetic metadata parses");
        let actual: Vec<String> = check(&parsed).iter().map(ToString::to_string).collect();
        assert_eq!(actual, expect);
    }

    /// The shape of the workspace the house style describes.
    const GOOD: &[(&str, &[&str])] = &[
        ("ragtune-core", &["async-trait", "serde", "thiserror", "dev:proptest", "dev:tokio"]),
        ("ragtune-ingest", &["ragtune-core", "pulldown-cmark", "dev:tempfile"]),
        ("ragtune-embed", &["ragtune-core", "fastembed", "ort", "dev:ragtune-testkit", "dev:ragtune-provision"]),
        ("ragtune-provision", &["ragtune-core", "dirs", "sha2", "zip", "dev:tempfile"]),
        ("ragtune-store", &["ragtune-core", "redb", "qdrant-client", "reqwest", "tokio", "dev:ragtune-testkit"]),
        ("ragtune-llm", &["ragtune-core", "reqwest"]),
        ("ragtune-web", &["ragtune-core", "reqwest"]),
        ("ragtune-retrieve", &["ragtune-core", "dev:ragtune-testkit", "dev:tokio"]),
        ("ragtune-evaluators", &["ragtune-core"]),
        ("ragtune-rerank", &["ragtune-core"]),
        (
            "ragtune",
            &[
                "ragtune-core",
                "ragtune-ingest",
                "ragtune-embed",
                "ragtune-store",
                "ragtune-llm",
                "ragtune-web",
                "ragtune-retrieve",
                "ragtune-evaluators",
                "ragtune-rerank",
                "ragtune-provision",
                "dev:ragtune-testkit",
            ],
        ),
        ("ragtune-eval", &["ragtune", "serde", "xxhash-rust", "dev:tempfile", "dev:tokio"]),
        ("ragtune-cli", &["ragtune", "ragtune-eval", "clap", "tokio"]),
        ("ragtune-server", &["ragtune", "ragtune-core", "axum", "tokio"]),
        ("ragtune-testkit", &["ragtune-core", "serde_json"]),
        ("xtask", &["anyhow", "ragtune-provision", "ragtune-testkit", "dev:tempfile"]),
        ("tests", &["dev:ragtune", "dev:ragtune-eval", "dev:ragtune-testkit"]),
        ("benches", &["ragtune-eval", "dev:ragtune", "dev:criterion"]),
    ];

    #[test]
    fn good_graph_passes() {
        check_graph(GOOD, &[]);
    }

    #[test]
    fn middle_crate_depending_on_sibling_fails() {
        check_graph(
            &[("ragtune-core", &[]), ("ragtune-embed", &["ragtune-core"]), ("ragtune-store", &["ragtune-embed"])],
            &["ragtune-store depends on ragtune-embed: middle crates may depend only on ragtune-core (and on \
               ragtune-testkit as a dev-dependency) (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn middle_crate_may_use_testkit_only_in_tests() {
        check_graph(
            &[("ragtune-retrieve", &["ragtune-core", "ragtune-testkit"])],
            &["ragtune-retrieve depends on ragtune-testkit: middle crates may depend only on ragtune-core (and on \
               ragtune-testkit as a dev-dependency) (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn core_depending_on_tokio_fails() {
        check_graph(
            &[("ragtune-core", &["serde", "tokio"])],
            &["ragtune-core depends on tokio: ragtune-core depends on no runtime or vendor SDK (house-style.md, \
               Dependency direction)"],
        );
    }

    #[test]
    fn core_depending_on_our_crates_fails() {
        check_graph(
            &[("ragtune-core", &["dev:ragtune-testkit"])],
            &["ragtune-core depends on ragtune-testkit (dev-dependency): ragtune-core depends on no crate of ours \
               (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn fastembed_outside_embed_fails() {
        check_graph(
            &[("ragtune-embed", &["ragtune-core", "fastembed"]), ("ragtune-rerank", &["ragtune-core", "fastembed"])],
            &["ragtune-rerank depends on fastembed: the vendor SDK fastembed may be used only by ragtune-embed \
               (vendor SDKs stay inside one crate) (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn vendor_rule_covers_dev_dependencies() {
        check_graph(
            &[("tests", &["dev:ragtune", "dev:qdrant-client"])],
            &["tests depends on qdrant-client (dev-dependency): the vendor SDK qdrant-client may be used only by \
               ragtune-store (vendor SDKs stay inside one crate) (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn surfaces_go_through_the_facade() {
        check_graph(
            &[("ragtune-cli", &["ragtune", "ragtune-store"])],
            &["ragtune-cli depends on ragtune-store: only the facade `ragtune` may depend on the middle crates; \
               surfaces and tooling go through the facade (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn testkit_depends_on_core_only_and_never_ships() {
        check_graph(
            &[("ragtune-testkit", &["ragtune-core", "ragtune-store"]), ("ragtune", &["ragtune-testkit"])],
            &[
                "ragtune depends on ragtune-testkit: ragtune-testkit may only be a dev-dependency: fakes never ship \
                 (house-style.md, Dependency direction)",
                "ragtune-testkit depends on ragtune-store: ragtune-testkit depends on ragtune-core only \
                 (house-style.md, Dependency direction)",
            ],
        );
    }

    #[test]
    fn the_facade_never_depends_on_the_evaluation() {
        check_graph(
            &[("ragtune", &["ragtune-core", "ragtune-eval"]), ("ragtune-eval", &["ragtune"])],
            &[
                "ragtune depends on ragtune-eval: only ragtune-cli and the tooling (xtask, tests, benches) may depend on \
               ragtune-eval: the engine never depends on the code that measures it (house-style.md, Dependency \
               direction)",
            ],
        );
        check_graph(
            &[("ragtune", &["ragtune-core", "dev:ragtune-eval"]), ("ragtune-server", &["ragtune", "ragtune-eval"])],
            &[
                "ragtune depends on ragtune-eval (dev-dependency): only ragtune-cli and the tooling (xtask, tests, \
                 benches) may depend on ragtune-eval: the engine never depends on the code that measures it \
                 (house-style.md, Dependency direction)",
                "ragtune-server depends on ragtune-eval: only ragtune-cli and the tooling (xtask, tests, benches) may \
                 depend on ragtune-eval: the engine never depends on the code that measures it (house-style.md, \
                 Dependency direction)",
            ],
        );
    }

    #[test]
    fn the_evaluation_reaches_the_layers_through_the_facade() {
        check_graph(
            &[("ragtune-eval", &["ragtune", "ragtune-evaluators"])],
            &[
                "ragtune-eval depends on ragtune-evaluators: only the facade `ragtune` may depend on the middle crates; \
               surfaces and tooling go through the facade (house-style.md, Dependency direction)",
            ],
        );
    }

    #[test]
    fn nothing_depends_on_surfaces() {
        check_graph(
            &[("ragtune-server", &["ragtune", "ragtune-cli"])],
            &["ragtune-server depends on ragtune-cli: nothing depends on the surfaces (ragtune-cli, ragtune-server) \
               or the tooling (xtask, tests, benches) (house-style.md, Dependency direction)"],
        );
    }

    #[test]
    fn support_crates_stay_light_and_below_the_engine() {
        check_graph(
            &[
                ("ragtune-provision", &["ragtune-core", "ragtune-embed", "tokio", "dev:tokio"]),
                ("ragtune-store", &["ragtune-core", "ragtune-provision", "dev:ragtune-provision"]),
            ],
            &[
                "ragtune-provision depends on ragtune-embed: support crates (ragtune-provision) depend on \
                 ragtune-core only (house-style.md, Dependency direction)",
                "ragtune-provision depends on tokio: support crates depend on no runtime or vendor SDK: the task \
                 runner builds them (house-style.md, Dependency direction)",
                "ragtune-store depends on ragtune-provision: middle crates may depend only on ragtune-core (and on \
                 ragtune-testkit as a dev-dependency) (house-style.md, Dependency direction)",
            ],
        );
    }

    #[test]
    fn xtask_does_not_build_the_engine() {
        check_graph(
            &[("xtask", &["anyhow", "ragtune-provision", "ragtune", "ragtune-embed", "dev:ragtune"])],
            &[
                "xtask depends on ragtune-embed: only the facade `ragtune` may depend on the middle crates; \
                 surfaces and tooling go through the facade (house-style.md, Dependency direction)",
                "xtask depends on ragtune: xtask depends only on the light crates of ours (ragtune-core, \
                 ragtune-provision, ragtune-testkit); it runs the engine through the `ragtune` binary, so that \
                 `cargo xtask layers` and CI's own steps never build the engine (docs/adr/0008) (house-style.md, \
                 Dependency direction)",
            ],
        );
    }

    #[test]
    fn unknown_member_needs_a_layer() {
        check_graph(
            &[("ragtune-graph", &["ragtune-core"])],
            &["ragtune-graph is a workspace member without a layer: add it to the layer table in \
               xtask/src/layers.rs and to house-style.md (house-style.md, Layout)"],
        );
    }

    #[test]
    fn lints_must_be_inherited() {
        let inherits = "[package]\nname = \"a\"\n\n[lints]\nworkspace = true\n";
        assert_eq!(check_lints("a", inherits), None);
        assert_eq!(check_lints("a", "lints.workspace = true\n[package]\nname = \"a\"\n"), None);
        // A dotted key after `[package]` belongs to the package table, where cargo ignores it.
        assert!(check_lints("a", "[package]\nname = \"a\"\nlints.workspace = true\n").is_some());

        let missing = check_lints("a", "[package]\nname = \"a\"\n").expect("no [lints] table is a violation");
        assert_eq!(
            missing.message,
            "a does not set `[lints] workspace = true` in its Cargo.toml (house-style.md, Layout)"
        );
        assert!(check_lints("a", "[lints.rust]\nunsafe_code = \"deny\"\n").is_some());
    }

    /// `cargo xtask layers` fails when a middle crate depends on a sibling: a real workspace on disk, through the
    /// same `cargo metadata` path the command uses.
    #[test]
    fn layers_fails_on_a_workspace_where_a_middle_crate_depends_on_a_sibling() {
        let workspace = tempfile::tempdir().expect("temporary directory");
        let root = workspace.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("file in a directory")).expect("create directory");
            std::fs::write(path, text).expect("write file");
        };
        write(
            "Cargo.toml",
            "[workspace]\nresolver = \"3\"\nmembers = [\"crates/*\"]\n\n\
             [workspace.lints.rust]\nunsafe_code = \"deny\"\n",
        );
        let manifest = |name: &str, dependencies: &str| {
            format!(
                "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
                 [dependencies]\n{dependencies}\n[lints]\nworkspace = true\n"
            )
        };
        write("crates/ragtune-core/Cargo.toml", &manifest("ragtune-core", ""));
        write(
            "crates/ragtune-retrieve/Cargo.toml",
            &manifest("ragtune-retrieve", "ragtune-core = { path = \"../ragtune-core\" }\n"),
        );
        write(
            "crates/ragtune-store/Cargo.toml",
            &manifest(
                "ragtune-store",
                "ragtune-core = { path = \"../ragtune-core\" }\nragtune-retrieve = { path = \"../ragtune-retrieve\" }\n",
            ),
        );
        for name in ["ragtune-core", "ragtune-retrieve", "ragtune-store"] {
            write(&format!("crates/{name}/src/lib.rs"), "");
        }

        let (members, violations) = check_workspace(root).expect("cargo metadata runs on the temporary workspace");
        assert_eq!(members, 3);
        let rendered: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            rendered,
            ["ragtune-store depends on ragtune-retrieve: middle crates may depend only on ragtune-core (and on \
              ragtune-testkit as a dev-dependency) (house-style.md, Dependency direction)"]
        );
        let error = report(root).expect_err("the layers command fails on this workspace");
        assert_eq!(error.to_string(), "1 layer violation(s) in the workspace dependency graph");
    }
}
