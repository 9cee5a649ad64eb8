//! tollgate's configuration: YAML files in tollgate's own format or in envoyproxy/ratelimit's,
//! side by side, read into [`Limits`], the compiled and immutable set of policies, Envoy
//! descriptor trees and proxy routes that the server and the proxy decide with.
//!
//! This crate is pure: it reads files and nothing else (no runtime, no sockets), so a config can
//! be checked anywhere (`tollgate check-config`, a CI job, a test) exactly as the server will
//! load it.
//!
//! ```
//! let limits = tollgate_config::parse(
//!     "limits.yaml",
//!     r#"
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit: {unit: day, requests_per_unit: 5}
//! "#,
//! )?;
//! let resolved = limits
//!     .resolve(
//!         "messaging",
//!         &[
//!             ("message_type".to_owned(), "marketing".to_owned()),
//!             ("to_number".to_owned(), "2061111111".to_owned()),
//!         ],
//!     )
//!     .expect("five marketing messages a day per number");
//! assert_eq!(resolved.policy().unwrap().max_cost(), 5);
//! # Ok::<(), tollgate_config::ConfigError>(())
//! ```
//!
//! # Layout
//!
//! - this file: [`load`] (a file or a directory) and [`parse`] (one file's text), which tell the
//!   two formats apart and merge files into one [`Limits`]; [`demo`], the built-in policies.
//! - [`ours`]: tollgate's format (`policies:` and `routes:`).
//! - [`envoy`]: envoyproxy/ratelimit's format (`domain:` and `descriptors:`), with tollgate's
//!   extensions.
//! - [`envoy_plan`]: what a `ShouldRateLimit` request means: the engine rules of its
//!   descriptors and, from the engine's verdict, the answer. The gRPC door, `/json` and explain
//!   all plan with it, so they give one answer.
//! - `unit` (private): [`Unit`], upstream's units, which the config, the planner and
//!   `/rlconfig` share.
//! - `dump` (private): [`Limits::dump`], the loaded descriptors one per line, as
//!   envoyproxy/ratelimit's `/rlconfig` prints them.
//! - [`duration`]: the duration and rate grammar both formats share.
//! - `error`: [`ConfigError`], which names the file and the path to the field, and
//!   [`ConfigErrorKind`].
//! - `fields` (private): the scalar fields both formats share (algorithm names, failure modes).
//! - [`limits`]: [`Limits`], the compiled configuration, and the envoyproxy/ratelimit descriptor
//!   matcher ([`Limits::resolve`]) with its store keys.
//! - [`policy_tests`]: policy tests (`tollgate test`), timed requests and the answers they must
//!   get, read with the same file and field errors.
//! - [`routes`]: which policies `tollgate proxy` applies to a request path, and its key.
//! - `store_failure` (private): [`Limits::fail_closed`], the limits a store failure leaves
//!   without an answer, which the server's readiness asks about.
//! - `read` (private): reading one file with a size cap ([`MAX_FILE_BYTES`]) and a timeout
//!   ([`READ_TIMEOUT`]); a FIFO or a device is refused before it is opened.
//!
//! # Two formats
//!
//! Teams moving from envoyproxy/ratelimit keep their descriptor files as they are, and new limits
//! can be written as plain named policies; a directory may hold both kinds. Each file is one or
//! the other, told apart by its top-level keys:
//!
//! - `policies:` — tollgate's format, described in [`ours`];
//! - `domain:` and `descriptors:` — envoyproxy/ratelimit's, described in [`envoy`] with
//!   tollgate's extensions and the few places where tollgate differs.
//!
//! Loading is all or nothing: the first problem stops it with a [`ConfigError`] naming the file,
//! the path of the field and what is wrong, so a reload can keep the running configuration and
//! log exactly what to fix.
//!
//! # Files and directories
//!
//! [`load`] takes a file or a directory. In a directory, every regular file (or symlink to one)
//! whose name ends in `.yaml` or `.yml` (any case) and does not start with `.` is read, in byte
//! order of the names; subdirectories are not searched. A link with such a name that leads to no
//! file (its target is missing, or links loop) is an error naming it
//! ([`ConfigErrorKind::BrokenLink`]), since the limits it stood for would not be read. That skips Kubernetes ConfigMap
//! bookkeeping (`..data`, `..2024_...`) and editor files, and makes errors repeatable. A
//! policy name or a domain defined in two files is an error naming both files, unless
//! [`LoadOptions::merge_domains`] is set (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`): then the
//! files of one domain are put together, and only the same descriptor twice is an error. An
//! empty directory gives empty [`Limits`].
//!
//! # Values
//!
//! Durations and rates follow one grammar in both formats; see [`duration`]. A plain number is not
//! a duration: `window: 90` is refused with a hint to write `"90s"`, because seconds,
//! milliseconds and nanoseconds are all common defaults elsewhere.

pub mod changes;
mod dump;
pub mod duration;
pub mod envoy;
pub mod envoy_plan;
mod error;
mod fields;
pub mod limits;
mod metadata;
pub mod ours;
mod pattern;
pub mod policy_tests;
mod read;
pub mod routes;
mod store_failure;
mod unit;
pub mod yaml;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use yaml_serde::Value;

pub use dump::{per_period, reported_limit};
pub use error::{ConfigError, ConfigErrorKind};
pub use limits::{ENVOY_POLICY_PREFIX, Limits, NamedPolicy, Resolved, apply_replaces, override_key};
pub use metadata::{Metadata, MetadataValue};
pub use read::{MAX_FILE_BYTES, READ_TIMEOUT};
pub use routes::{Route, RouteKey, route_for};
pub use unit::Unit;

use envoy::EnvoyFile;
use ours::OursFile;

/// Loads a configuration file, or every `*.yaml` and `*.yml` file of a directory (see the
/// [crate docs](crate#files-and-directories)), into one [`Limits`]. Each file must be a regular
/// file of at most [`MAX_FILE_BYTES`], read within [`READ_TIMEOUT`].
///
/// ```
/// let dir = tempfile::tempdir()?;
/// std::fs::write(
///     dir.path().join("api.yaml"),
///     "policies:\n  api:\n    algorithm: gcra\n    rate: 10/s\n    burst: 20\n",
/// )?;
/// std::fs::write(
///     dir.path().join("edge.yml"),
///     "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
/// )?;
/// let limits = tollgate_config::load(dir.path())?;
/// assert!(limits.policy("api").is_some());
/// assert_eq!(limits.domains(), ["edge"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load(path: &Path) -> Result<Limits, ConfigError> {
    load_with(path, &LoadOptions::default())
}

/// How files are put together; the default refuses a domain defined in two files.
///
/// ```
/// use tollgate_config::LoadOptions;
///
/// assert!(!LoadOptions::default().merge_domains);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Put together the descriptors of every file of an envoyproxy/ratelimit domain, as upstream
    /// does with `MERGE_DOMAIN_CONFIG=true`, instead of refusing the second file. The same
    /// top-level descriptor (key and value) in two files is still an error.
    pub merge_domains: bool,
}

impl LoadOptions {
    /// The options with domain merging on or off.
    ///
    /// ```
    /// assert!(tollgate_config::LoadOptions::default().with_merge_domains(true).merge_domains);
    /// ```
    #[must_use]
    pub fn with_merge_domains(mut self, merge: bool) -> Self {
        self.merge_domains = merge;
        self
    }
}

/// [`load`] with [`LoadOptions`].
///
/// ```
/// use tollgate_config::LoadOptions;
///
/// let dir = tempfile::tempdir()?;
/// let file = |key: &str| format!("domain: edge\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n");
/// std::fs::write(dir.path().join("a.yaml"), file("remote_address"))?;
/// std::fs::write(dir.path().join("b.yaml"), file("user"))?;
/// assert!(tollgate_config::load(dir.path()).is_err(), "one domain, two files");
/// let merged = tollgate_config::load_with(dir.path(), &LoadOptions::default().with_merge_domains(true))?;
/// assert!(merged.resolve("edge", &[("user".into(), "u1".into())]).is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Limits, ConfigError> {
    let shown = path.display().to_string();
    let io_err = |e| ConfigError::new(shown.clone(), None, ConfigErrorKind::Io(e));
    let files = if fs::metadata(path).map_err(io_err)?.is_dir() {
        config_files(path)?
    } else {
        vec![path.to_owned()]
    };
    let mut loader = Loader {
        options: *options,
        ..Loader::default()
    };
    for file in files {
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        let yaml = read::read_config_file(&file)
            .map_err(|e| ConfigError::new(name.clone(), None, ConfigErrorKind::Io(e)))?;
        loader.add(&name, &yaml)?;
    }
    loader.finish()
}

/// Parses one file's text; `file_name` is used in errors. [`load`] does the same for every file
/// it reads.
///
/// ```
/// let limits = tollgate_config::parse(
///     "edge.yaml",
///     "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
/// )?;
/// assert_eq!(limits.domains(), ["edge"]);
///
/// let err = tollgate_config::parse("edge.yaml", "domain: edge\ndescriptors:\n  - value: x\n")
///     .unwrap_err();
/// assert_eq!(err.to_string(), "edge.yaml: descriptors[0].key: must not be empty");
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn parse(file_name: &str, yaml: &str) -> Result<Limits, ConfigError> {
    let mut loader = Loader::default();
    loader.add(file_name, yaml)?;
    loader.finish()
}

/// Parses several files' texts as one config, as [`load_with`] reads a directory: `(name, text)`
/// pairs in order, each name used in its errors. What a config pushed as several documents (an
/// xDS server's resources) is loaded with.
///
/// ```
/// use tollgate_config::LoadOptions;
///
/// let file = |key: &str| format!("domain: edge\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n");
/// let files = [("a".to_owned(), file("ip")), ("b".to_owned(), file("user"))];
/// let err = tollgate_config::parse_files(&files, &LoadOptions::default()).unwrap_err();
/// assert!(err.to_string().starts_with("b: "), "{err}");
/// let merged = tollgate_config::parse_files(&files, &LoadOptions::default().with_merge_domains(true))?;
/// assert!(merged.resolve("edge", &[("user".into(), "u1".into())]).is_some());
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn parse_files(files: &[(String, String)], options: &LoadOptions) -> Result<Limits, ConfigError> {
    let mut loader = Loader {
        options: *options,
        ..Loader::default()
    };
    for (name, text) in files {
        loader.add(name, text)?;
    }
    loader.finish()
}

/// The generation given to the policies a load makes: the time of the load, in milliseconds
/// since the Unix epoch. When instances of a fleet reload at different moments, a key's state
/// migrated by the later load is never migrated back by an instance still on the earlier one
/// (see [`tollgate::Policy::with_generation`]).
pub(crate) fn load_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The policies and routes served when no config is given: enough to try every kind of limit
/// from curl.
pub const DEMO_CONFIG: &str = include_str!("demo.yaml");

/// The built-in demo policies ([`DEMO_CONFIG`]).
///
/// ```
/// let limits = tollgate_config::demo()?;
/// assert!(limits.policy("demo").is_some());
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn demo() -> Result<Limits, ConfigError> {
    parse("built-in demo config", DEMO_CONFIG)
}

/// Loads the config at `path`, or the [`demo`] policies when there is none: what
/// `tollgate serve` and `tollgate proxy` start with.
///
/// ```
/// let limits = tollgate_config::load_or_demo(None)?;
/// assert!(limits.policy("demo").is_some());
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn load_or_demo(path: Option<&Path>) -> Result<Limits, ConfigError> {
    match path {
        Some(path) => load(path),
        None => demo(),
    }
}

/// The config files of a directory, sorted by name. A link named like a config file that leads
/// to no file is an error naming it: skipping it would silently drop the limits it stood for.
fn config_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let io_err = |at: &Path, e| ConfigError::new(at.display().to_string(), None, ConfigErrorKind::Io(e));
    let mut named = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let path = entry.map_err(|e| io_err(dir, e))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let is_yaml = Path::new(name)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
        if is_yaml && !name.starts_with('.') {
            named.push(path);
        }
    }
    // In name order, so the first broken link reported is always the same one.
    named.sort();
    let mut files = Vec::with_capacity(named.len());
    for path in named {
        // `metadata` follows symlinks, as ConfigMap files are.
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => files.push(path),
            Ok(_) => {}
            Err(source) => match fs::read_link(&path) {
                Ok(target) => {
                    return Err(ConfigError::new(
                        path.display().to_string(),
                        None,
                        ConfigErrorKind::BrokenLink { target, source },
                    ));
                }
                // Removed since the directory was listed: not a config file any more.
                Err(_) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return Err(io_err(&path, source)),
            },
        }
    }
    Ok(files)
}

/// Collects files into one [`Limits`], remembering which file defined each name.
#[derive(Default)]
struct Loader {
    options: LoadOptions,
    limits: Limits,
    policy_files: HashMap<String, String>,
    domain_files: HashMap<String, String>,
    /// The file and index of each route, for errors in [`Loader::finish`].
    route_origins: Vec<(String, usize)>,
}

impl Loader {
    fn add(&mut self, file: &str, yaml: &str) -> Result<(), ConfigError> {
        match read_file(file, yaml)? {
            Parsed::Ours(ours) => {
                let compiled = ours.compile(file)?;
                self.limits.extend_access(compiled.access);
                for (i, route) in compiled.routes.into_iter().enumerate() {
                    if let Some((first, note)) = self
                        .limits
                        .routes()
                        .iter()
                        .enumerate()
                        .find_map(|(j, earlier)| route.collision(earlier).map(|note| (j, note)))
                    {
                        let (first_file, _) = &self.route_origins[first];
                        return Err(ConfigError::new(
                            file,
                            Some(format!("routes[{i}].prefix")),
                            ConfigErrorKind::Duplicate {
                                what: "route prefix",
                                name: route.prefix().to_owned(),
                                first: format!("in {first_file}{note}"),
                            },
                        ));
                    }
                    self.route_origins.push((file.to_owned(), i));
                    self.limits.insert_route(route);
                }
                for (name, policy) in compiled.concurrency {
                    if self.limits.has_policy(&name) || self.limits.has_concurrency(&name) {
                        return Err(ConfigError::new(
                            file,
                            Some(format!("policies.{name}")),
                            ConfigErrorKind::Duplicate {
                                what: "policy",
                                first: format!("in {}", self.policy_files[&name]),
                                name,
                            },
                        ));
                    }
                    self.policy_files.insert(name.clone(), file.to_owned());
                    self.limits.insert_concurrency(name, policy);
                }
                for (name, policy) in compiled.policies {
                    if self.limits.has_policy(&name) || self.limits.has_concurrency(&name) {
                        return Err(ConfigError::new(
                            file,
                            Some(format!("policies.{name}")),
                            ConfigErrorKind::Duplicate {
                                what: "policy",
                                first: format!("in {}", self.policy_files[&name]),
                                name,
                            },
                        ));
                    }
                    self.policy_files.insert(name.clone(), file.to_owned());
                    self.limits.insert_policy(name, policy);
                }
            }
            Parsed::Envoy(envoy) => {
                let name = envoy.domain(file)?;
                if self.options.merge_domains
                    && let Some(domain) = self.limits.domain_mut(&name)
                {
                    let earlier = self.domain_files.get(&name).map(String::as_str);
                    return envoy.compile_into(file, domain, earlier);
                }
                let domain = envoy.compile(file)?;
                if self.limits.has_domain(&domain.name) {
                    return Err(ConfigError::new(
                        file,
                        Some("domain".to_owned()),
                        ConfigErrorKind::Duplicate {
                            what: "domain",
                            first: format!("in {}", self.domain_files[&domain.name]),
                            name: domain.name,
                        },
                    ));
                }
                self.domain_files.insert(domain.name.clone(), file.to_owned());
                self.limits.insert_domain(domain);
            }
        }
        Ok(())
    }
}

impl Loader {
    /// Checks what spans files (every policy a route names exists) and hands over the limits.
    fn finish(self) -> Result<Limits, ConfigError> {
        for (route, (file, index)) in self.limits.routes().iter().zip(&self.route_origins) {
            for (j, name) in route.policies().iter().enumerate() {
                if self.limits.has_concurrency(name) {
                    return Err(ConfigError::new(
                        file.as_str(),
                        Some(format!("routes[{index}].policies[{j}]")),
                        ConfigErrorKind::Value(format!(
                            "`{name}` is a concurrency policy: a route applies rate limits only"
                        )),
                    ));
                }
                if !self.limits.has_policy(name) {
                    return Err(ConfigError::new(
                        file.as_str(),
                        Some(format!("routes[{index}].policies[{j}]")),
                        ConfigErrorKind::UnknownPolicy { name: name.clone() },
                    ));
                }
            }
        }
        Ok(self.limits)
    }
}

/// A file, read and shaped but not yet compiled.
enum Parsed {
    Ours(OursFile),
    Envoy(EnvoyFile),
}

/// Reads the YAML, tells the format from the top-level keys and checks the shape.
fn read_file(file: &str, yaml: &str) -> Result<Parsed, ConfigError> {
    let syntax = |e: yaml_serde::Error| ConfigError::syntax(file, &e);
    let mut value: Value = yaml::parse(file, yaml)?;
    // `<<: *anchor` merge keys, which Go's yaml.v2 (upstream's parser) also applies.
    value.apply_merge().map_err(syntax)?;
    let format_err = |what| ConfigError::new(file, None, ConfigErrorKind::Format(what));
    let Value::Mapping(top) = &value else {
        return Err(format_err(if value.is_null() {
            "the file is empty: expected tollgate `policies` or an envoyproxy/ratelimit `domain`"
        } else {
            "expected a map with tollgate `policies` or an envoyproxy/ratelimit `domain`"
        }));
    };
    let ours = top.contains_key("policies") || top.contains_key("access");
    let envoy = top.contains_key("domain") || top.contains_key("descriptors");
    if ours && envoy {
        return Err(format_err(
            "a file holds either tollgate `policies` or an envoyproxy/ratelimit `domain`, not both",
        ));
    }
    if !ours && !envoy {
        return Err(format_err(
            "expected a map with tollgate `policies` or an envoyproxy/ratelimit `domain`",
        ));
    }
    let schema = |e: serde_path_to_error::Error<yaml_serde::Error>| {
        let path = e.path().to_string();
        let path = (path != ".").then_some(path);
        ConfigError::new(file, path, ConfigErrorKind::Schema(e.into_inner().to_string()))
    };
    if ours {
        serde_path_to_error::deserialize(value)
            .map(Parsed::Ours)
            .map_err(schema)
    } else {
        serde_path_to_error::deserialize(value)
            .map(Parsed::Envoy)
            .map_err(schema)
    }
}
