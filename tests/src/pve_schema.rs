//! A checker that holds requests to Proxmox VE's published API schema.
//!
//! It loads `pve-api-schema-9.1.json`, `pve-api-schema-8.4.json` and `pve-api-formats.json`
//! from `../shared/pve-api` (relative to the workspace; override with `BOSUN_PVE_API_DIR`),
//! indexes the path templates, matches a concrete path to its template and validates the
//! method and every parameter: name (including indexed names such as `net0` for `net[n]`),
//! type (Perl booleans `0`/`1`), enum, minimum/maximum, minLength/maxLength, `pattern`, named
//! formats, inline property-string formats and `requires`.
//!
//! A missing or unreadable file is an error, never a skip: the conformance test fails with the
//! path it looked at.

mod formats;
mod value;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use formats::Formats;

/// The environment variable that overrides where the schema files are read from.
pub const API_DIR_ENV: &str = "BOSUN_PVE_API_DIR";
/// The 9.1 schema's file name.
pub const SCHEMA_91: &str = "pve-api-schema-9.1.json";
/// The 8.4 schema's file name.
pub const SCHEMA_84: &str = "pve-api-schema-8.4.json";
/// The named-formats file's name.
pub const FORMATS: &str = "pve-api-formats.json";

/// Loading a schema file failed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The file could not be read.
    #[error(
        "reading PVE API file {path} (set {API_DIR_ENV} or put ../shared/pve-api beside the workspace)"
    )]
    Read {
        /// The path tried.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("parsing PVE API file {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The JSON failure.
        #[source]
        source: serde_json::Error,
    },
    /// The file is JSON but not shaped like a PVE API dump.
    #[error("PVE API file {path} has an unexpected shape: {what}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
}

/// The directory holding the schema files: `$BOSUN_PVE_API_DIR`, else
/// `<tests crate>/../../shared/pve-api`.
pub fn api_dir() -> PathBuf {
    match std::env::var_os(API_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/pve-api"),
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value, SchemaError> {
    let bytes = std::fs::read(path).map_err(|source| SchemaError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| SchemaError::Parse {
        path: path.to_owned(),
        source,
    })
}

/// One problem found with a request or route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The schema it was checked against (e.g. `9.1`).
    pub schema: String,
    /// The HTTP method.
    pub method: String,
    /// The concrete path (or template, for routes).
    pub path: String,
    /// The parameter concerned, if any.
    pub param: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[PVE {}] {} {}", self.schema, self.method, self.path)?;
        if let Some(p) = &self.param {
            write!(f, " param `{p}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Placeholders that take the rest of the path when they come last (PVE reads everything
/// after `content/` as the volume id, `/` included).
const GREEDY_PARAMS: &[&str] = &["volume"];

/// Highest index of each indexed parameter family (`net[n]` → 31), from pve-container.
const INDEXED_MAX: &[(&str, u32)] = &[
    ("net", 31),
    ("ipconfig", 31),
    ("scsi", 30),
    ("mp", 255),
    ("dev", 255),
    ("unused", 255),
];

/// One loaded PVE API schema.
#[derive(Debug)]
pub struct Schema {
    label: String,
    /// Path template → method → method schema.
    endpoints: BTreeMap<String, BTreeMap<String, Value>>,
    formats: Formats,
}

/// A concrete path matched to its template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMatch {
    /// The schema's path template.
    pub template: String,
    /// Values of the template's `{placeholders}`.
    pub path_params: BTreeMap<String, String>,
}

impl Schema {
    /// Loads a schema file and the formats file; `label` names it in violations.
    pub fn load(label: &str, schema_file: &Path, formats_file: &Path) -> Result<Self, SchemaError> {
        let formats = Formats::load(formats_file)?;
        let tree = read_json(schema_file)?;
        Self::from_tree(label, schema_file, &tree, formats)
    }

    /// Builds a schema from an already parsed dump (the mutation test edits one in memory).
    pub fn from_tree(
        label: &str,
        origin: &Path,
        tree: &Value,
        formats: Formats,
    ) -> Result<Self, SchemaError> {
        let shape = |what: &str| SchemaError::Shape {
            path: origin.to_owned(),
            what: what.to_owned(),
        };
        let roots = tree
            .as_array()
            .ok_or_else(|| shape("top level is not an array"))?;
        let mut endpoints = BTreeMap::new();
        let mut stack: Vec<&Value> = roots.iter().collect();
        while let Some(node) = stack.pop() {
            let path = node
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| shape("a node has no path"))?;
            if let Some(info) = node.get("info").and_then(Value::as_object) {
                let methods = info.iter().map(|(m, s)| (m.clone(), s.clone())).collect();
                endpoints.insert(path.to_owned(), methods);
            }
            if let Some(children) = node.get("children").and_then(Value::as_array) {
                stack.extend(children);
            }
        }
        if endpoints.is_empty() {
            return Err(shape("no endpoint has an info block"));
        }
        Ok(Self {
            label: label.to_owned(),
            endpoints,
            formats,
        })
    }

    /// The label given at load time.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// How many path templates have at least one method.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether the schema has `method` on `template`.
    pub fn has_endpoint(&self, method: &str, template: &str) -> bool {
        self.method_schema(method, template).is_some()
    }

    fn method_schema(&self, method: &str, template: &str) -> Option<&Value> {
        self.endpoints.get(template)?.get(method)
    }

    /// Matches a concrete path (below `/api2/json`, raw or percent-decoded) to a template.
    /// Literal segments beat placeholders; a final placeholder may take the remaining
    /// segments (PVE treats everything after `content/` as the volume id).
    pub fn match_path(&self, concrete: &str) -> Option<PathMatch> {
        let segs: Vec<String> = concrete
            .trim_start_matches('/')
            .split('/')
            .map(percent_decode)
            .collect();
        let mut best: Option<(usize, PathMatch)> = None;
        for template in self.endpoints.keys() {
            let tsegs: Vec<&str> = template.trim_start_matches('/').split('/').collect();
            if let Some((literals, params)) = match_segments(&tsegs, &segs)
                && best.as_ref().is_none_or(|(l, _)| literals > *l)
            {
                best = Some((
                    literals,
                    PathMatch {
                        template: template.clone(),
                        path_params: params,
                    },
                ));
            }
        }
        best.map(|(_, m)| m)
    }

    /// The schema of parameter `name` of `method template`, resolving indexed names.
    pub fn param_schema(&self, method: &str, template: &str, name: &str) -> Option<&Value> {
        let props = self
            .method_schema(method, template)?
            .pointer("/parameters/properties")?;
        if let Some(p) = props.get(name) {
            return Some(p);
        }
        let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
        let base = &name[..name.len() - digits.len()];
        let index: u32 = digits.parse().ok()?;
        let (_, max) = INDEXED_MAX.iter().find(|(b, _)| *b == base)?;
        if index > *max || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        props.get(format!("{base}[n]"))
    }

    /// Whether a parameter is of `type: array` (a form sends an array as the key repeated).
    fn is_array(&self, method: &str, template: &str, name: &str) -> bool {
        self.param_schema(method, template, name)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            == Some("array")
    }

    fn violation(
        &self,
        method: &str,
        path: &str,
        param: Option<&str>,
        message: impl Into<String>,
    ) -> Violation {
        Violation {
            schema: self.label.clone(),
            method: method.to_owned(),
            path: path.to_owned(),
            param: param.map(str::to_owned),
            message: message.into(),
        }
    }

    /// Validates one request: the path and method exist, and every parameter (query/body
    /// plus the path's placeholders) is known and valid; required and `requires` hold.
    pub fn validate_request(
        &self,
        method: &str,
        path: &str,
        params: &[(String, String)],
    ) -> Vec<Violation> {
        let Some(m) = self.match_path(path) else {
            return vec![self.violation(
                method,
                path,
                None,
                "no path template in the schema matches",
            )];
        };
        let Some(ms) = self.method_schema(method, &m.template) else {
            return vec![self.violation(
                method,
                path,
                None,
                format!("template {} has no {method}", m.template),
            )];
        };
        let mut out = Vec::new();
        let mut all: BTreeMap<&str, &str> = BTreeMap::new();
        for (k, v) in &m.path_params {
            all.insert(k, v);
        }
        for (k, v) in params {
            if let Some(prev) = all.get(k.as_str()) {
                if m.path_params.contains_key(k) && *prev != v {
                    out.push(self.violation(
                        method,
                        path,
                        Some(k),
                        "duplicate parameter (already defined in URI) with conflicting values",
                    ));
                } else if !m.path_params.contains_key(k) && !self.is_array(method, &m.template, k) {
                    out.push(self.violation(method, path, Some(k), "parameter sent twice"));
                }
            }
            all.insert(k, v);
        }
        for (name, val) in &all {
            match self.param_schema(method, &m.template, name) {
                None => out.push(self.violation(
                    method,
                    path,
                    Some(name),
                    "property is not defined in schema",
                )),
                Some(ps) => {
                    for msg in value::check(ps, val, &self.formats) {
                        out.push(self.violation(method, path, Some(name), msg));
                    }
                    if let Some(req) = ps.get("requires").and_then(Value::as_str)
                        && !all.contains_key(req)
                    {
                        out.push(self.violation(
                            method,
                            path,
                            Some(name),
                            format!("missing property required by '{name}': {req}"),
                        ));
                    }
                }
            }
        }
        if let Some(props) = ms
            .pointer("/parameters/properties")
            .and_then(Value::as_object)
        {
            for (name, ps) in props {
                if !value::is_optional(ps)
                    && !name.contains("[n]")
                    && !all.contains_key(name.as_str())
                {
                    out.push(self.violation(
                        method,
                        path,
                        Some(name),
                        "property is missing and it is not optional",
                    ));
                }
            }
        }
        out
    }

    /// Checks a route a server claims to serve: the template has the method and every
    /// accepted parameter name is in the schema.
    pub fn check_route(&self, method: &str, template: &str, params: &[&str]) -> Vec<Violation> {
        if !self.has_endpoint(method, template) {
            return vec![self.violation(method, template, None, "endpoint is not in the schema")];
        }
        params
            .iter()
            .filter(|p| self.param_schema(method, template, p).is_none())
            .map(|p| self.violation(method, template, Some(p), "parameter is not in the schema"))
            .collect()
    }
}

fn match_segments(
    template: &[&str],
    concrete: &[String],
) -> Option<(usize, BTreeMap<String, String>)> {
    let mut params = BTreeMap::new();
    let mut literals = 0;
    for (i, t) in template.iter().enumerate() {
        let is_last = i + 1 == template.len();
        if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            let value = if is_last && GREEDY_PARAMS.contains(&name) {
                if i >= concrete.len() {
                    return None;
                }
                concrete[i..].join("/")
            } else {
                if is_last && concrete.len() != template.len() {
                    return None;
                }
                concrete.get(i)?.clone()
            };
            if value.is_empty() {
                return None;
            }
            params.insert(name.to_owned(), value);
        } else {
            if concrete.get(i).map(String::as_str) != Some(*t) {
                return None;
            }
            literals += 1;
            if is_last && concrete.len() != template.len() {
                return None;
            }
        }
    }
    Some((literals, params))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(Ok(b)) = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Both schemas the client is held to.
#[derive(Debug)]
pub struct ApiSchemas {
    /// PVE 9.1.
    pub v91: Schema,
    /// PVE 8.4.
    pub v84: Schema,
}

impl ApiSchemas {
    /// Loads both schemas and the formats from `dir`.
    pub fn load_from(dir: &Path) -> Result<Self, SchemaError> {
        let formats = dir.join(FORMATS);
        Ok(Self {
            v91: Schema::load("9.1", &dir.join(SCHEMA_91), &formats)?,
            v84: Schema::load("8.4", &dir.join(SCHEMA_84), &formats)?,
        })
    }

    /// Loads both schemas from [`api_dir`].
    pub fn load() -> Result<Self, SchemaError> {
        Self::load_from(&api_dir())
    }

    /// Both schemas, 9.1 first.
    pub fn each(&self) -> [&Schema; 2] {
        [&self.v91, &self.v84]
    }

    /// Validates a request against both schemas.
    pub fn validate_request(
        &self,
        method: &str,
        path: &str,
        params: &[(String, String)],
    ) -> Vec<Violation> {
        self.each()
            .iter()
            .flat_map(|s| s.validate_request(method, path, params))
            .collect()
    }
}

/// Whether a concrete path (percent-decoded) fits a path template, with the same rules as
/// [`Schema::match_path`].
pub fn template_matches(template: &str, concrete: &str) -> bool {
    let segs: Vec<String> = concrete
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let tsegs: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    match_segments(&tsegs, &segs).is_some()
}
