//! Tidy: every path and symbol that ARCHITECTURE.md, README.md and the pages under
//! docs/ name in backticks exists, the claims they make that the code can answer are
//! true, no text of the repository cites a document kept outside it, and rules of the
//! code base hold (the length of a source file; one home for each shared rule; no copy
//! by value of a rule's constant, [`BY_VALUE`]; and, in [`code_rules`], one item model,
//! mains that only build, no `Result<bool>`).
//!
//! The checks are pure functions over text and a [`Repo`] (every file's path, and the
//! text of the files they read), so the unit tests at the end run the same checks on
//! made-up documents and sources.
//!
//! What a backticked span must resolve to, by its shape:
//! - a path (`crates/store`, `bench/REPORT.md`, `queue.rs`, `directory/hot.rs`): a
//!   file or directory from the root; a short form, the end of a path under the crate
//!   its passage is about (a list item or paragraph that named `crates/<name>` before
//!   it), or anywhere when the passage names no crate; a bare file name may also be
//!   one the code writes (a string literal, `{}` holes matching anything); a path under
//!   a git-ignored output directory (`.local/`), a name the code uses;
//! - a Rust path (`store::batch::Slots`, `Ingest::process`): the crate's modules
//!   walked file by file, the last name an item, a `pub use` or an enum variant of the
//!   module or of a module below it, a method or variant of the type before it;
//! - a call (`shard_index(..)`): a fn of crates/*/src or xtask/src;
//! - a fn of a file (`crates/query/tests/scope.rs::a_token_that_grants_nothing_reads_nothing`,
//!   then `::another_test` for another fn of the same file): the file, and a fn of that
//!   name in it;
//! - a CamelCase name: a Rust item or variant, a name template.yaml declares (a
//!   parameter, resource, output...), a string literal of the code equal to it (a
//!   metric's name), or one of the AWS names in [`AWS_VOCABULARY`];
//! - any other name (`RAISE_AHEAD_WCU`, `ts_ms`, `run-local`): a name or string of the
//!   code (sources of crates/, xtask/, tests/ and fuzz/, comments aside; template.yaml,
//!   openapi.yaml, the manifests, infra/, examples/, bench/python/);
//! - a command line of our binaries (`cargo xtask bench`, `shardline audit`): its
//!   subcommand a variant of the binary's, its `-p` a package, its paths files;
//! - an expression (`[ts, ts + REKEY_HORIZON]`): the constants and types in it.
//!
//! The claims checked against the code, in each paragraph, list item or table row:
//! - a list item or table row about a binary's crate that names two or more of its
//!   commands names them all (the variants of its main.rs's `Command` enum);
//! - a passage about the fuzz targets that names one names them all, and a count of
//!   them ("four fuzz targets") is theirs;
//! - an event file said of a test is named by that test, and a test said to run every
//!   event reads events/ or names each of its files;
//! - a number stated beside a variable or a template parameter (`NAME` (32),
//!   `NAME` = 30, (`NAME`, 5 s)), or in a table's default column, is the default the
//!   code reads the variable with (or the constant's value), or the template's
//!   `Default`, units of time converted; a default the code does not write down as a
//!   number is not checked; a variable read with a different default by each function
//!   (`SHARD_CACHE_TTL_SECS`: the ingest's 60 s, the query's 5 s) is held to the default
//!   of the function the passage names nearest it (see [`FUNCTIONS`]), and a default
//!   stated for it in a passage that names no function fails;
//! - README.md has at most [`README_MAX_LINES`] lines.
//!
//! Placeholders (`{s}#{bucket}`, `<id>`, `...`), numbers, flags, URLs, HTTP paths,
//! stored keys (`3#2026-06-22T01`) and JSON are not references. Inside fenced blocks
//! only the file paths of shell lines are checked; relative link targets must exist as
//! written.

mod code_rules;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// This file: its strings name made-up things on purpose, so it is no evidence.
const TIDY: &str = "tests/tests/tidy.rs";

/// The documents whose backticked names must resolve, besides every Markdown file under
/// [`DOCS`].
const NAMING_DOCUMENTS: &[&str] = &["ARCHITECTURE.md", "README.md"];

/// The directory of the reference pages: each of its Markdown files is held as the
/// [`NAMING_DOCUMENTS`] are.
const DOCS: &str = "docs";

/// The longest a source file of crates/*/src may be, its test modules aside.
const MAX_LINES: usize = 800;

/// AWS's own names the documents use and that neither our code nor template.yaml
/// spells out. Every other name must resolve in the repository.
const AWS_VOCABULARY: &[&str] = &[
    // CloudWatch metrics of DynamoDB tables and of Lambda functions.
    "ReadThrottleEvents",
    "WriteThrottleEvents",
    "ConsumedWriteCapacityUnits",
    "Errors",
    // DynamoDB: a Query's count of items evaluated, the delete-or-put shape of a
    // BatchWriteItem request, and the tables' on-demand cap and warm throughput.
    "ScannedCount",
    "PutRequest",
    "OnDemandThroughput",
    "WarmThroughput",
    // SQS: the batch call that sets messages' visibility timeouts.
    "ChangeMessageVisibilityBatch",
    // IAM: a role's unique id (what SQS reports as a message's sender).
    "RoleId",
    // The AWS config file's setting for an external credential program.
    "credential_process",
    // Secrets Manager: the call that stores a secret's new value.
    "PutSecretValue",
];

/// Calls in the documents' formulas that are mathematics, not our functions.
const MATH_NOTATION: &[&str] = &["ceil", "floor", "hash", "min", "max", "mod"];

/// Programs whose command lines the documents quote.
const PROGRAMS: &[&str] = &[
    "aws",
    "bash",
    "cargo",
    "cat",
    "cfn-lint",
    "cp",
    "curl",
    "export",
    "git",
    "node",
    "npm",
    "npx",
    "pip",
    "python",
    "python3",
    "sam",
    "sh",
    "shardline",
    "shardline-local",
    "capacity-proxy",
];

/// Directories the repository view leaves out: build output, installed tools,
/// fuzzing state and what the tools write (all git-ignored).
const SKIPPED_ANYWHERE: &[&str] = &[".git", "target", "node_modules", "__pycache__"];
const SKIPPED_FROM_ROOT: &[&str] = &[
    ".local",
    ".aws-sam",
    "bench/out",
    "fuzz/corpus",
    "fuzz/artifacts",
    "fuzz/coverage",
];

/// Git-ignored directories the tools write, which a document may name.
const OUTPUT_DIRS: &[&str] = &[".local", ".aws-sam", "target", "bench/out"];

/// File extensions that make a span a path.
const PATH_EXTENSIONS: &[&str] = &[
    "rs", "md", "yaml", "yml", "toml", "py", "ts", "js", "json", "txt", "csv", "png", "log", "env",
    "lock", "sh",
];

/// Extensions of the files whose text the checks read.
const TEXT_EXTENSIONS: &[&str] = &["rs", "md", "toml", "yaml", "yml", "txt", "py", "ts"];

// ---------------------------------------------------------------------------------------
// The repository view.

/// The repository as the checks see it.
#[derive(Debug, Default)]
pub(crate) struct Repo {
    /// Every file by its path from the root (`/`-separated), with its text if the
    /// checks read files of its kind.
    files: BTreeMap<String, Option<String>>,
    /// Every directory that holds a file.
    dirs: BTreeSet<String>,
}

impl Repo {
    /// A repository of these files (path, text).
    pub(crate) fn from_files(files: &[(&str, &str)]) -> Self {
        let mut repo = Self::default();
        for (path, text) in files {
            repo.add(path, Some((*text).to_owned()));
        }
        repo
    }

    /// The repository on disk at `root`.
    pub(crate) fn load(root: &Path) -> Self {
        let mut repo = Self::default();
        repo.walk(root, "");
        repo
    }

    fn walk(&mut self, root: &Path, rel: &str) {
        // Other work may move files meanwhile: what vanishes is left out.
        let Ok(entries) = fs::read_dir(root.join(rel)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !SKIPPED_ANYWHERE.contains(&name.as_str())
                    && !SKIPPED_FROM_ROOT.contains(&path.as_str())
                {
                    self.walk(root, &path);
                }
            } else if kind.is_file() {
                let text = TEXT_EXTENSIONS
                    .contains(&extension(&path))
                    .then(|| fs::read_to_string(entry.path()).ok())
                    .flatten();
                self.add(&path, text);
            }
        }
    }

    fn add(&mut self, path: &str, text: Option<String>) {
        let mut dir = path;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            self.dirs.insert(parent.to_owned());
            dir = parent;
        }
        self.files.insert(path.to_owned(), text);
    }

    fn is_file(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    fn exists(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        path.is_empty() || self.is_file(path) || self.dirs.contains(path)
    }

    fn text(&self, path: &str) -> Option<&str> {
        self.files.get(path).and_then(Option::as_deref)
    }

    /// Every file with its text.
    fn texts(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files
            .iter()
            .filter_map(|(path, text)| Some((path.as_str(), text.as_deref()?)))
    }

    /// Every file and directory path.
    fn paths(&self) -> impl Iterator<Item = &str> {
        self.files
            .keys()
            .chain(self.dirs.iter())
            .map(String::as_str)
    }
}

fn extension(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map_or("", |(_, ext)| ext)
}

/// `path` is `dir` or below it.
fn under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `rel` taken from `dir`, with `.` and `..` resolved.
fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// A Rust source file of the workspace's code (not this file).
fn is_source(path: &str) -> bool {
    path.ends_with(".rs")
        && path != TIDY
        && ["crates", "xtask", "tests", "fuzz"]
            .iter()
            .any(|dir| under(path, dir))
}

/// A file of `crates/*/src` or `xtask/src`.
fn is_crate_src(path: &str) -> bool {
    under(path, "xtask/src")
        || (path.starts_with("crates/") && path.split('/').nth(2) == Some("src"))
}

// ---------------------------------------------------------------------------------------
// Rust sources: comments, strings and items.

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(is_ident_char)
}

/// A Rust source split into its code, comments and string literals.
#[derive(Debug, Default)]
struct Lexed {
    /// The code: comments removed, literals emptied, lines kept.
    code: String,
    /// Each line of each comment, with its line number.
    comments: Vec<(usize, String)>,
    /// Each string literal's contents as written, with its first line.
    strings: Vec<(usize, String)>,
}

fn lex(src: &str) -> Lexed {
    let c: Vec<char> = src.chars().collect();
    let mut out = Lexed::default();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        let after_ident = i > 0 && is_ident_char(c[i - 1]);
        if c[i] == '/' && next == Some('/') {
            let start = i;
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            out.comments.push((line, c[start..i].iter().collect()));
        } else if c[i] == '/' && next == Some('*') {
            i = block_comment(&c, i, &mut line, &mut out);
        } else if let Some((start, end, close)) = (!after_ident).then(|| string_at(&c, i)).flatten()
        {
            let text: String = c[start..end].iter().collect();
            out.code.push('"');
            for _ in text.matches('\n') {
                out.code.push('\n');
            }
            out.code.push('"');
            out.strings.push((line, text.clone()));
            line += text.matches('\n').count();
            i = close;
        } else if c[i] == '\'' {
            i = char_or_lifetime(&c, i, &mut out.code);
        } else {
            if c[i] == '\n' {
                line += 1;
            }
            out.code.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Skips the (nested) block comment at `i`; returns the index after it.
fn block_comment(c: &[char], mut i: usize, line: &mut usize, out: &mut Lexed) -> usize {
    let mut depth = 0;
    let mut text = String::new();
    let mut first = *line;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            depth += 1;
            text.push_str("/*");
            i += 2;
        } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
            depth -= 1;
            text.push_str("*/");
            i += 2;
            if depth == 0 {
                break;
            }
        } else if c[i] == '\n' {
            out.comments.push((first, std::mem::take(&mut text)));
            out.code.push('\n');
            *line += 1;
            first = *line;
            i += 1;
        } else {
            text.push(c[i]);
            i += 1;
        }
    }
    out.comments.push((first, text));
    out.code.push(' ');
    i
}

/// The string literal (plain, byte, C or raw) starting at `i`: where its contents
/// start and end, and the index after it.
fn string_at(c: &[char], i: usize) -> Option<(usize, usize, usize)> {
    let mut j = i;
    if matches!(c[j], 'b' | 'c') {
        j += 1;
    }
    if c.get(j) == Some(&'r') {
        j += 1;
        let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
        if c.get(j + hashes) != Some(&'"') {
            return None;
        }
        let start = j + hashes + 1;
        let mut k = start;
        while k < c.len() {
            if c[k] == '"'
                && c[k + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&h| h == '#')
                    .count()
                    == hashes
            {
                return Some((start, k, k + 1 + hashes));
            }
            k += 1;
        }
        return Some((start, c.len(), c.len()));
    }
    if c.get(j) != Some(&'"') {
        return None;
    }
    let start = j + 1;
    let mut k = start;
    while k < c.len() {
        match c[k] {
            '\\' => k += 2,
            '"' => return Some((start, k, k + 1)),
            _ => k += 1,
        }
    }
    Some((start, c.len(), c.len()))
}

/// A char literal (emptied) or a lifetime (kept) at `i`; returns the index after it.
fn char_or_lifetime(c: &[char], i: usize, code: &mut String) -> usize {
    if c.get(i + 1) == Some(&'\\') {
        let mut k = i + 3;
        while k < c.len() && c[k] != '\'' && c[k] != '\n' {
            k += 1;
        }
        code.push_str("''");
        return k + 1;
    }
    if c.get(i + 2) == Some(&'\'') {
        code.push_str("''");
        return i + 3;
    }
    code.push('\'');
    i + 1
}

/// A token of code: an identifier, a lifetime, a number or punctuation.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    ident: bool,
    line: usize,
}

fn tokens(code: &str) -> Vec<Token> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || ch == '\'' {
            let start = i;
            i += 1;
            // A raw identifier reads as its name.
            let raw = ch == 'r'
                && c.get(i) == Some(&'#')
                && c.get(i + 1).is_some_and(|&n| is_ident_char(n));
            if raw {
                i += 1;
            }
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            let from = if raw { start + 2 } else { start };
            let text: String = c[from..i].iter().collect();
            let ident = !ch.is_ascii_digit() && ch != '\'';
            out.push(Token { text, ident, line });
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let text = if ["::", "->", "=>"].contains(&two.as_str()) {
                two
            } else {
                ch.to_string()
            };
            i += text.chars().count();
            out.push(Token {
                text,
                ident: false,
                line,
            });
        }
    }
    out
}

/// An item defined in a file.
#[derive(Debug, Clone)]
struct Def {
    name: String,
    /// `fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`, `mod`, `union` or
    /// `macro_rules`.
    kind: &'static str,
    /// The type an impl or trait holding it is for.
    owner: Option<String>,
    line: usize,
    /// At the file's own module level (not in an impl, a body or an inline module).
    top: bool,
}

/// What a Rust file defines and re-exports.
#[derive(Debug, Default)]
struct Items {
    defs: Vec<Def>,
    /// (enum, variant).
    variants: Vec<(String, String)>,
    /// Names a `pub use` at module level brings in.
    reexports: BTreeSet<String>,
}

#[derive(Debug, Clone)]
enum Scope {
    Mod,
    Impl(Option<String>),
    Trait(String),
    /// An enum's body and the bracket depth it opened at.
    Enum(String, usize),
    Other,
}

/// The state of a walk over a file's tokens.
#[derive(Debug, Default)]
struct Walk {
    stack: Vec<Scope>,
    /// The scope the next `{` opens, and the bracket depth it was announced at.
    pending: Option<(Scope, usize)>,
    brackets: usize,
    expect_variant: bool,
    impl_start: usize,
}

impl Walk {
    fn owner(&self) -> Option<String> {
        match self.stack.last() {
            Some(Scope::Impl(owner)) => owner.clone(),
            Some(Scope::Trait(name)) => Some(name.clone()),
            _ => None,
        }
    }

    fn at_module_level(&self) -> bool {
        self.stack.iter().all(|s| matches!(s, Scope::Mod))
    }

    fn in_enum_body(&self) -> bool {
        matches!(self.stack.last(), Some(Scope::Enum(_, depth)) if *depth == self.brackets)
    }
}

fn items(src: &str) -> Items {
    let toks = tokens(&lex(src).code);
    let mut out = Items::default();
    let mut w = Walk::default();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].text.as_str();
        match t {
            "#" => {
                i = skip_attribute(&toks, i);
                continue;
            }
            "use" if w.at_module_level() => {
                i = use_tree(&toks, i, &mut out);
                continue;
            }
            "(" | "[" => w.brackets += 1,
            ")" | "]" => w.brackets = w.brackets.saturating_sub(1),
            "{" => {
                let scope = match w.pending.take() {
                    Some((Scope::Impl(_), _)) => {
                        Scope::Impl(impl_owner(&toks[w.impl_start + 1..i]))
                    }
                    Some((scope, _)) => scope,
                    None => Scope::Other,
                };
                w.expect_variant = matches!(scope, Scope::Enum(..));
                w.stack.push(scope);
            }
            "}" => {
                w.stack.pop();
                w.expect_variant = false;
            }
            ";" if w.pending.as_ref().is_some_and(|(_, d)| *d == w.brackets) => w.pending = None,
            "," if w.in_enum_body() => w.expect_variant = true,
            "impl" if w.pending.is_none() => {
                w.pending = Some((Scope::Impl(None), w.brackets));
                w.impl_start = i;
            }
            _ if w.expect_variant && toks[i].ident && w.in_enum_body() => {
                if let Some(Scope::Enum(name, _)) = w.stack.last() {
                    out.variants.push((name.clone(), t.to_owned()));
                }
                w.expect_variant = false;
            }
            _ => definition(&toks, i, &mut w, &mut out),
        }
        i += 1;
    }
    out
}

/// Records the item that the keyword at `i` defines, if it is one.
fn definition(toks: &[Token], i: usize, w: &mut Walk, out: &mut Items) {
    let kind: &'static str = match toks[i].text.as_str() {
        "fn" => "fn",
        "struct" => "struct",
        "enum" => "enum",
        "trait" => "trait",
        "type" => "type",
        "const" => "const",
        "static" => "static",
        "mod" => "mod",
        "union" => "union",
        "macro_rules" => "macro_rules",
        _ => return,
    };
    let mut j = i + 1;
    while toks
        .get(j)
        .is_some_and(|t| t.text == "mut" || t.text == "!" && kind == "macro_rules")
    {
        j += 1;
    }
    let Some(name) = toks.get(j).filter(|t| t.ident && t.text != "_") else {
        return;
    };
    // `const fn`, `const unsafe fn`: the fn is the item.
    if kind == "const" && ["fn", "unsafe", "async", "extern"].contains(&name.text.as_str()) {
        return;
    }
    if kind == "union"
        && !toks
            .get(j + 1)
            .is_some_and(|t| t.text == "{" || t.text == "<")
    {
        return;
    }
    let scope = match kind {
        "fn" | "struct" | "union" => Some(Scope::Other),
        "enum" => Some(Scope::Enum(name.text.clone(), w.brackets)),
        "trait" => Some(Scope::Trait(name.text.clone())),
        "mod" => Some(Scope::Mod),
        _ => None,
    };
    if let Some(scope) = scope {
        w.pending = Some((scope, w.brackets));
    }
    out.defs.push(Def {
        name: name.text.clone(),
        kind,
        owner: w.owner(),
        line: toks[i].line,
        top: w.stack.is_empty(),
    });
}

/// The index after the attribute at `i` (`#[...]` or `#![...]`).
fn skip_attribute(toks: &[Token], i: usize) -> usize {
    let mut j = i + 1;
    if toks.get(j).is_some_and(|t| t.text == "!") {
        j += 1;
    }
    if toks.get(j).is_none_or(|t| t.text != "[") {
        return i + 1;
    }
    let mut depth = 0;
    while j < toks.len() {
        match toks[j].text.as_str() {
            "[" => depth += 1,
            "]" => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

/// Reads the `use` at `i`, recording what a `pub use` brings in; returns the index
/// after its `;`.
fn use_tree(toks: &[Token], i: usize, out: &mut Items) -> usize {
    // `pub use` or `pub(crate) use`.
    let text = |k: usize| i.checked_sub(k).map(|k| toks[k].text.as_str());
    let public = text(1) == Some("pub") || text(1) == Some(")") && text(4) == Some("pub");
    let mut last: Option<&str> = None;
    let mut prefixes: Vec<Option<&str>> = Vec::new();
    let mut j = i + 1;
    while j < toks.len() && toks[j].text != ";" {
        let t = toks[j].text.as_str();
        match t {
            "{" => {
                prefixes.push(last.take());
            }
            "," | "}" => {
                if let Some(name) = last.take().filter(|_| public) {
                    let name = if name == "self" {
                        prefixes.last().copied().flatten().unwrap_or(name)
                    } else {
                        name
                    };
                    out.reexports.insert(name.to_owned());
                }
                if t == "}" {
                    prefixes.pop();
                }
            }
            // `a as b` brings in `b`: the last name wins.
            "as" | "::" => {}
            _ if toks[j].ident => last = Some(t),
            _ => last = None,
        }
        j += 1;
    }
    if let Some(name) = last.filter(|n| public && *n != "_") {
        out.reexports.insert(name.to_owned());
    }
    j + 1
}

/// The type an impl's header (the tokens after `impl`, before `{`) is for.
fn impl_owner(header: &[Token]) -> Option<String> {
    let mut i = 0;
    if header.first().is_some_and(|t| t.text == "<") {
        let mut depth = 0;
        while i < header.len() {
            match header[i].text.as_str() {
                "<" => depth += 1,
                ">" => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    let rest = &header[i..];
    let mut depth = 0;
    let mut start = 0;
    let mut end = rest.len();
    for (k, t) in rest.iter().enumerate() {
        match t.text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            "for" if depth == 0 => start = k + 1,
            "where" if depth == 0 => {
                end = k;
                break;
            }
            _ => {}
        }
    }
    let mut depth = 0;
    let mut owner = None;
    for t in rest.get(start..end)? {
        match t.text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            "dyn" | "mut" | "const" => {}
            _ if depth == 0 && t.ident => owner = Some(t.text.clone()),
            _ => {}
        }
    }
    owner
}

// ---------------------------------------------------------------------------------------
// The code: symbols and text the documents' names are looked up in.

/// What the documents' names are looked up in.
#[derive(Debug)]
pub(crate) struct Code<'r> {
    repo: &'r Repo,
    /// The items of every Rust file of crates/*/src, xtask/src and tests/tests.
    items: BTreeMap<String, Items>,
    /// Code and strings of the sources (comments aside) and the text of the other files
    /// the code is made of.
    corpus: String,
    /// The string literals of crates/*/src and xtask/src.
    strings: Vec<String>,
    /// The names template.yaml declares.
    template_names: BTreeSet<String>,
    /// Package names and dependency names of every manifest.
    packages: BTreeSet<String>,
    dependencies: BTreeSet<String>,
}

/// Files, besides the Rust sources, whose text is part of the code.
fn is_code_text(path: &str) -> bool {
    ["template.yaml", "openapi.yaml", "samconfig.toml"].contains(&path)
        || path.ends_with("Cargo.toml")
        || ["infra", "examples", "bench/python", ".cargo"]
            .iter()
            .any(|dir| under(path, dir))
}

/// A line of YAML, TOML or Python without its `#` comment.
fn without_hash_comment(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    line.find(" #").map_or(line, |at| &line[..at])
}

/// The names a SAM template declares: its parameters, conditions, rules, resources and
/// outputs (not the properties inside them, which are AWS's names).
fn template_names(template: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut section = "";
    for line in template.lines().map(without_hash_comment) {
        let Some((key, _)) = line.split_once(':') else {
            continue;
        };
        if !line.starts_with(' ') {
            section = key;
        } else if line.starts_with("  ")
            && !line.starts_with("   ")
            && [
                "Parameters",
                "Conditions",
                "Rules",
                "Resources",
                "Outputs",
                "Mappings",
            ]
            .contains(&section)
            && is_ident(key.trim())
        {
            names.insert(key.trim().to_owned());
        }
    }
    names
}

impl<'r> Code<'r> {
    pub(crate) fn new(repo: &'r Repo) -> Self {
        let mut code = Self {
            repo,
            items: BTreeMap::new(),
            corpus: String::new(),
            strings: Vec::new(),
            template_names: BTreeSet::new(),
            packages: BTreeSet::new(),
            dependencies: BTreeSet::new(),
        };
        for (path, text) in repo.texts() {
            if is_source(path) {
                let lexed = lex(text);
                code.corpus.push_str(&lexed.code);
                for (_, s) in &lexed.strings {
                    code.corpus.push('\n');
                    code.corpus.push_str(s);
                }
                if is_crate_src(path) {
                    code.strings
                        .extend(lexed.strings.into_iter().map(|(_, s)| s));
                }
                if is_crate_src(path) || under(path, "tests/tests") {
                    code.items.insert(path.to_owned(), items(text));
                }
            } else if is_code_text(path) {
                for line in text.lines() {
                    code.corpus.push_str(without_hash_comment(line));
                    code.corpus.push('\n');
                }
                if path.ends_with("Cargo.toml") {
                    code.read_manifest(text);
                }
            }
            code.corpus.push('\n');
        }
        if let Some(template) = repo.text("template.yaml") {
            code.template_names = template_names(template);
        }
        code
    }

    fn read_manifest(&mut self, text: &str) {
        let mut section = "";
        for line in text.lines().map(without_hash_comment) {
            let line = line.trim();
            if line.starts_with('[') {
                section = line;
            } else if let Some((key, value)) = line.split_once('=') {
                let key = key.trim();
                if section == "[package]" && key == "name" {
                    self.packages
                        .insert(value.trim().trim_matches('"').to_owned());
                } else if section.contains("dependencies") {
                    let name = key.split('.').next().unwrap_or(key);
                    self.dependencies.insert(name.replace('-', "_"));
                }
            }
        }
    }

    /// `word` occurs in the code as a whole name or word.
    fn occurs(&self, word: &str) -> bool {
        occurs_in(&self.corpus, word)
    }

    fn crate_files(&self) -> impl Iterator<Item = (&str, &Items)> {
        self.items
            .iter()
            .filter(|(path, _)| is_crate_src(path))
            .map(|(path, items)| (path.as_str(), items))
    }

    /// An item, a re-export or an enum variant named `name` in crates/*/src or xtask/src.
    fn named(&self, name: &str) -> bool {
        self.crate_files().any(|(_, items)| {
            items.defs.iter().any(|d| d.name == name)
                || items.reexports.contains(name)
                || items.variants.iter().any(|(_, v)| v == name)
        })
    }

    /// A type (struct, enum, trait, alias, union) named `name`, or a re-export of one.
    fn type_named(&self, name: &str) -> bool {
        self.crate_files().any(|(_, items)| {
            items.reexports.contains(name)
                || items.defs.iter().any(|d| {
                    d.name == name && ["struct", "enum", "trait", "type", "union"].contains(&d.kind)
                })
        })
    }

    /// A method, associated item or variant `member` of `owner`, anywhere.
    fn member_of(&self, owner: &str, member: &str) -> bool {
        self.items.values().any(|items| {
            items
                .defs
                .iter()
                .any(|d| d.name == member && d.owner.as_deref() == Some(owner))
                || items
                    .variants
                    .iter()
                    .any(|(e, v)| e == owner && v == member)
        })
    }

    /// The variants of the enums under `dir`, kebab-cased as clap names subcommands.
    fn subcommands(&self, dir: &str) -> BTreeSet<String> {
        self.items
            .iter()
            .filter(|(path, _)| under(path, dir))
            .flat_map(|(_, items)| items.variants.iter().map(|(_, v)| kebab(v)))
            .collect()
    }

    /// A file name the code writes: a string literal equal to it or ending in it, `{}`
    /// holes matching anything.
    fn writes_file(&self, name: &str) -> bool {
        self.occurs(name)
            || self.strings.iter().any(|s| {
                let base = s.rsplit('/').next().unwrap_or(s);
                base.contains('{') && matches_holes(base, name)
            })
    }
}

/// `word` occurs in `text` with no name character on either side.
fn occurs_in(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let edge = |c: Option<char>| c.is_none_or(|c| !is_ident_char(c));
    text.match_indices(word).any(|(at, _)| {
        edge(text[..at].chars().next_back()) && edge(text[at + word.len()..].chars().next())
    })
}

/// `name` matches `pattern`, whose `{...}` holes match any text.
fn matches_holes(pattern: &str, name: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        parts.push(&rest[..open]);
        rest = rest[open..]
            .find('}')
            .map_or("", |close| &rest[open + close + 1..]);
    }
    parts.push(rest);
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() < 2 || !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut at = first.len();
    let end = name.len() - last.len();
    if !name.ends_with(last) {
        return false;
    }
    for part in &parts[1..parts.len() - 1] {
        match name[at..end].find(part) {
            Some(found) => at += found + part.len(),
            None => return false,
        }
    }
    true
}

/// `RunLocal` as clap names it: `run-local`.
fn kebab(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.extend(c.to_lowercase());
    }
    out
}

// ---------------------------------------------------------------------------------------
// The documents: spans and what they must resolve to.

/// A name a document gives: its line, its text and the crate its passage is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    line: usize,
    text: String,
    /// `crates/<name>` when the passage named that crate before this span.
    context: Option<String>,
    /// How the document gives it: a code span, a path in a shell block, a link target.
    form: Form,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Code,
    Fenced,
    Link,
}

/// The inline code spans of a Markdown document outside fenced blocks, the file paths
/// of its shell blocks, and its relative link targets.
fn spans(doc: &str) -> Vec<Span> {
    let mut out = Vec::new();
    let mut block: Vec<(usize, &str)> = Vec::new();
    let mut fence: Option<(&str, bool)> = None;
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        let t = line.trim_start();
        if let Some((marker, shell)) = fence {
            if t.starts_with(marker) {
                fence = None;
            } else if shell {
                out.extend(shell_paths(n, line));
            }
            continue;
        }
        let starts_item = t.is_empty()
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.starts_with('|')
            || t.starts_with('#')
            || t.split_once(". ")
                .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_digit()));
        if t.starts_with("```") || t.starts_with("~~~") {
            code_spans(&block, &mut out);
            block.clear();
            let info = t.trim_start_matches(['`', '~']).trim();
            fence = Some((&t[..3], ["sh", "bash", "shell", "console"].contains(&info)));
            continue;
        }
        if starts_item {
            code_spans(&block, &mut out);
            block.clear();
        }
        if !t.is_empty() {
            block.push((n, line));
            out.extend(link_targets(n, line));
        }
    }
    code_spans(&block, &mut out);
    out
}

/// The code spans of one paragraph, list item or table row.
fn code_spans(block: &[(usize, &str)], out: &mut Vec<Span>) {
    let chars: Vec<(char, usize)> = block
        .iter()
        .flat_map(|(n, l)| l.chars().chain(std::iter::once('\n')).map(move |c| (c, *n)))
        .collect();
    let run = |at: usize| chars[at..].iter().take_while(|(c, _)| *c == '`').count();
    let mut context: Option<String> = None;
    let mut i = 0;
    while i < chars.len() {
        if chars[i].0 != '`' {
            i += 1;
            continue;
        }
        let open = run(i);
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j].0 == '`' {
                let r = run(j);
                if r == open {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        let Some(close) = close else {
            i += open;
            continue;
        };
        let text: String = chars[i + open..close]
            .iter()
            .map(|(c, _)| if *c == '\n' { ' ' } else { *c })
            .collect();
        let text = text.trim().to_owned();
        if let Some(rest) = text.strip_prefix("crates/") {
            let name = rest.split('/').next().unwrap_or(rest);
            context = Some(format!("crates/{name}"));
        }
        out.push(Span {
            line: chars[i].1,
            text,
            context: context.clone(),
            form: Form::Code,
        });
        i = close + open;
    }
}

/// The file paths of a shell line: words with a `/` and a file extension, not under a
/// variable, an absolute or a hidden directory, and not URLs.
fn shell_paths(n: usize, line: &str) -> Vec<Span> {
    let line = without_hash_comment(line);
    line.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "\"'(),;&".contains(c)))
        .filter(|w| {
            w.contains('/')
                && PATH_EXTENSIONS.contains(&extension(w))
                && !w.contains(['$', '<', '*', '=', ':'])
                && !w.starts_with(['.', '/', '-', '~'])
        })
        .map(|w| Span {
            line: n,
            text: w.to_owned(),
            context: None,
            form: Form::Fenced,
        })
        .collect()
}

/// The relative targets of a line's Markdown links.
fn link_targets(n: usize, line: &str) -> Vec<Span> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or(target);
            let external = target.contains("://") || target.starts_with("mailto:");
            (!external && !target.is_empty()).then(|| Span {
                line: n,
                text: target.to_owned(),
                context: None,
                form: Form::Link,
            })
        })
        .collect()
}

/// A span that reads as a repository path.
fn is_path_like(s: &str) -> bool {
    !s.contains(':')
        && !s.contains(char::is_whitespace)
        && (s.contains('/') || (PATH_EXTENSIONS.contains(&extension(s)) && s.contains('.')))
}

fn is_number(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_digit() || ",._%".contains(c))
}

fn is_placeholder(s: &str) -> bool {
    s.contains(['{', '}', '<', '>', '…']) || s.contains("...")
}

fn is_screaming(s: &str) -> bool {
    s.chars().count() >= 2
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn is_camel(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// `name(...)`: the name.
fn call_name(s: &str) -> Option<&str> {
    let (name, rest) = s.split_once('(')?;
    (is_ident(name) && rest.ends_with(')')).then_some(name)
}

/// The program a command line starts with.
fn program(s: &str) -> Option<&str> {
    let (first, _) = s.split_once(' ')?;
    PROGRAMS.contains(&first).then_some(first)
}

impl Code<'_> {
    /// Every failure of a naming document: `file:line: `span`: what was looked for`.
    pub(crate) fn check_document(&self, file: &str, text: &str) -> Vec<String> {
        let mut failures = Vec::new();
        // The file of the last `file.rs::name`, which a `::name` after it continues.
        let mut last_file: Option<String> = None;
        for span in spans(text) {
            let found = match span.form {
                Form::Code if span.text.contains(".rs::") || span.text.starts_with("::") => {
                    self.check_fn_of_file(&span.text, span.context.as_deref(), &mut last_file)
                }
                Form::Code => self.check_span(&span.text, span.context.as_deref()),
                Form::Fenced => self.check_path(&span.text, None),
                Form::Link => self.check_link(parent(file), &span.text),
            };
            if let Err(why) = found {
                failures.push(format!("{file}:{}: `{}`: {why}", span.line, span.text));
            }
        }
        failures
    }

    /// `path.rs::name` (a fn of that file, a test most often), or `::name`, a fn of the
    /// file the last such span named.
    fn check_fn_of_file(
        &self,
        s: &str,
        context: Option<&str>,
        last_file: &mut Option<String>,
    ) -> Result<(), String> {
        // `file.rs::module::name`: the modules are the file's own, the name a fn of it.
        let (path, rest) = match s.find(".rs::") {
            Some(at) => (&s[..at + 3], &s[at + 5..]),
            None => ("", s.trim_start_matches("::")),
        };
        let name = rest.rsplit("::").next().unwrap_or(rest);
        let path = if path.is_empty() {
            last_file
                .clone()
                .ok_or_else(|| "a `::name` with no `file.rs::name` before it".to_owned())?
        } else {
            self.check_path(path, context)?;
            let scope = context
                .filter(|_| !path.starts_with("crates/"))
                .unwrap_or("");
            let found = self.repo.files.keys().find(|p| {
                p.as_str() == path || (under(p, scope) && p.ends_with(&format!("/{path}")))
            });
            let found = found.ok_or_else(|| format!("looked for the file `{path}`"))?;
            *last_file = Some(found.clone());
            found.clone()
        };
        if is_placeholder(name) {
            return Ok(());
        }
        let defined = self.repo.text(&path).is_some_and(|text| {
            items(text)
                .defs
                .iter()
                .any(|d| d.kind == "fn" && d.name == name)
        });
        if defined {
            Ok(())
        } else {
            Err(format!("looked for a fn `{name}` in {path}"))
        }
    }

    /// Ok if the span resolves; otherwise what was looked for.
    fn check_span(&self, s: &str, context: Option<&str>) -> Result<(), String> {
        let s = s.trim();
        let not_a_reference = s.chars().count() < 2
            || is_number(s)
            || s.starts_with('-')
            || s.starts_with('/')
            || s.starts_with("arn:")
            || s.contains("://")
            || s.contains('"')
            || s.contains('#')
            || s.starts_with('\\')
            || ["GET ", "PUT ", "POST ", "DELETE ", "HEAD "]
                .iter()
                .any(|verb| s.starts_with(verb));
        if not_a_reference {
            return Ok(());
        }
        if program(s).is_some() {
            return self.check_command(s);
        }
        if is_placeholder(s) || s.contains('*') {
            return if s.contains('*') && is_path_like(s) && !is_placeholder(s) {
                self.check_glob(s)
            } else {
                Ok(())
            };
        }
        if s.contains(char::is_whitespace)
            || s.starts_with(|c: char| c.is_ascii_digit() || "([".contains(c))
        {
            return match call_name(s) {
                Some(name) => self.check_call(name, s),
                None => self.check_expression(s),
            };
        }
        if let Some((key, _)) = s.split_once('=') {
            return self.check_span(key, context);
        }
        if let Some(name) = call_name(s) {
            return self.check_call(name, s);
        }
        if s.contains("::") {
            return self.check_rust_path(s.trim_end_matches("()"));
        }
        if is_path_like(s) {
            return self.check_path(s, context);
        }
        self.check_name(s)
    }

    /// A name that is not a path: a type, a constant, a field, a word of the code.
    fn check_name(&self, s: &str) -> Result<(), String> {
        if AWS_VOCABULARY.contains(&s) {
            return Ok(());
        }
        if is_camel(s) {
            let found = self.named(s)
                || self.template_names.contains(s)
                || self.strings.iter().any(|lit| lit == s);
            return if found {
                Ok(())
            } else {
                Err(format!(
                    "looked for a Rust item or enum variant `{s}` in crates/*/src and xtask/src, \
                     a parameter, resource or output `{s}` of template.yaml and a string \
                     literal \"{s}\" of the code (or, for AWS's own names, an entry of \
                     AWS_VOCABULARY)"
                ))
            };
        }
        let kebab_name = s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let found = self.occurs(s)
            || kebab_name && (self.packages.contains(s) || self.subcommands("").contains(s));
        if found {
            Ok(())
        } else {
            let what = if is_screaming(s) {
                "constant or variable"
            } else {
                "name"
            };
            Err(format!(
                "looked for the {what} `{s}` in the code and strings of crates/, xtask/, \
                 tests/ and fuzz/, in template.yaml, openapi.yaml, the manifests, infra/, \
                 examples/ and bench/python/"
            ))
        }
    }

    /// The constants, types and paths of an expression.
    fn check_expression(&self, s: &str) -> Result<(), String> {
        let words = s.split(|c: char| !is_ident_char(c) && c != ':');
        for word in words.map(|w| w.trim_matches(':')) {
            if word.contains("::") {
                self.check_rust_path(word)?;
            } else if is_screaming(word) || is_camel(word) {
                self.check_name(word)?;
            }
        }
        Ok(())
    }

    /// `name(args)`: a fn of crates/*/src or xtask/src, and the names in the arguments.
    fn check_call(&self, name: &str, s: &str) -> Result<(), String> {
        let defined = MATH_NOTATION.contains(&name)
            || self
                .crate_files()
                .any(|(_, items)| items.defs.iter().any(|d| d.kind == "fn" && d.name == name));
        if !defined {
            return Err(format!(
                "looked for a fn `{name}` in crates/*/src and xtask/src"
            ));
        }
        let args = &s[name.len()..];
        self.check_expression(args)
    }

    /// A command line: our binaries' subcommands, packages and paths in it.
    fn check_command(&self, s: &str) -> Result<(), String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let binary = match words.as_slice() {
            ["cargo", "xtask", sub, ..] => Some(("xtask/src", *sub)),
            ["shardline", sub, ..] => Some(("crates/shardline/src", *sub)),
            ["shardline-local", sub, ..] => Some(("crates/shardline-local/src", *sub)),
            _ => None,
        };
        if let Some((src, sub)) = binary.filter(|(_, sub)| !sub.starts_with(['-', '<'])) {
            let known = self.subcommands(src);
            if let Some(unknown) = sub.split('|').find(|alt| !known.contains(*alt)) {
                return Err(format!(
                    "looked for the subcommand `{unknown}` as a variant of an enum in {src}"
                ));
            }
        }
        for pair in words.windows(2) {
            if ["-p", "--package"].contains(&pair[0])
                && !pair[1].starts_with('<')
                && !self.packages.contains(pair[1])
            {
                return Err(format!(
                    "looked for a package named `{}` in the manifests",
                    pair[1]
                ));
            }
        }
        let paths = words[1..].iter().filter(|w| {
            w.contains('/') && !w.contains(['$', '<', ':']) && !w.starts_with(['.', '/', '-'])
        });
        for path in paths {
            self.check_path(path, None)?;
        }
        Ok(())
    }

    /// A path: from the root, as the end of a path under the passage's crate (or
    /// anywhere), a file name the code writes, or under an output directory.
    fn check_path(&self, s: &str, context: Option<&str>) -> Result<(), String> {
        let path = s.strip_prefix("./").unwrap_or(s).trim_end_matches('/');
        if self.repo.exists(path) {
            return Ok(());
        }
        if let Some(dir) = OUTPUT_DIRS.iter().find(|dir| under(path, dir)) {
            let name = path.rsplit('/').next().unwrap_or(path);
            return if path == *dir || self.writes_file(name) {
                Ok(())
            } else {
                Err(format!(
                    "{dir}/ is written by the tools; looked for `{name}` in the code's names and strings"
                ))
            };
        }
        let ends = |p: &str| p == path || p.ends_with(&format!("/{path}"));
        // A full path (`crates/<name>/...`) is never short for another.
        let context = context.filter(|_| !path.starts_with("crates/"));
        let scope = context.unwrap_or("");
        if self.repo.paths().any(|p| under(p, scope) && ends(p)) {
            return Ok(());
        }
        if context.is_none() && !path.contains('/') && self.writes_file(path) {
            return Ok(());
        }
        Err(match context {
            Some(dir) => format!(
                "looked for a file or directory ending in `{path}` under {dir}, the crate this passage is about"
            ),
            None => format!(
                "looked for `{path}` from the repository's root and as the end of any path in it"
            ),
        })
    }

    /// A path with `*` wildcards: at least one file matches it.
    fn check_glob(&self, s: &str) -> Result<(), String> {
        let pattern = s.replace('*', "{}");
        if self.repo.paths().any(|p| matches_holes(&pattern, p)) {
            Ok(())
        } else {
            Err(format!(
                "looked for a file matching `{s}` from the repository's root"
            ))
        }
    }

    /// A link target, relative to the document's directory.
    fn check_link(&self, dir: &str, target: &str) -> Result<(), String> {
        let path = join(dir, target);
        if self.repo.exists(&path) {
            Ok(())
        } else {
            Err(format!(
                "looked for the link target `{path}` in the repository"
            ))
        }
    }

    /// A Rust path: `crate::module::Item`, `Type::member`, `module::Item`, or an item of
    /// a dependency.
    fn check_rust_path(&self, s: &str) -> Result<(), String> {
        // A crate may be written as its package (`shardline-local::demo`).
        let s = &s.replacen(
            '-',
            "_",
            s.find("::").map_or(0, |end| s[..end].matches('-').count()),
        );
        let segs: Vec<&str> = s.split("::").collect();
        if !segs.iter().all(|seg| is_ident(seg)) || segs.len() < 2 {
            return Err(format!("`{s}` does not read as a Rust path of names"));
        }
        let first = segs[0];
        if first.starts_with(|c: char| c.is_ascii_uppercase()) {
            return self.check_type_member(&segs, s);
        }
        if let Some(src) = self.crate_src(first) {
            return self.check_in_module(&src, &self.crate_root(&src), &segs[1..], s);
        }
        if ["crate", "self", "super"].contains(&first) {
            let roots = self.crate_roots();
            return if roots
                .iter()
                .any(|(src, root)| self.check_in_module(src, root, &segs[1..], s).is_ok())
            {
                Ok(())
            } else {
                Err(format!("looked for `{s}` in every crate"))
            };
        }
        if ["std", "core", "alloc"].contains(&first) || self.dependencies.contains(first) {
            return Ok(());
        }
        // A module path without its crate: a module of that name anywhere.
        let modules: Vec<(String, String)> = self
            .items
            .keys()
            .filter(|p| is_crate_src(p))
            .filter(|p| {
                p.ends_with(&format!("/{first}.rs")) || p.ends_with(&format!("/{first}/mod.rs"))
            })
            .map(|p| (child_dir(p), p.clone()))
            .collect();
        if modules
            .iter()
            .any(|(dir, file)| self.check_in_module(dir, file, &segs[1..], s).is_ok())
        {
            return Ok(());
        }
        Err(format!(
            "looked for a crate `{first}` (crates/<name>/src, xtask, e2e), a dependency of that \
             name, or a module `{first}` in crates/*/src holding the rest"
        ))
    }

    /// `Type::member`: a type of crates/*/src or xtask/src and its method or variant.
    fn check_type_member(&self, segs: &[&str], s: &str) -> Result<(), String> {
        let [ty, member] = segs else {
            return Err(format!(
                "`{s}`: looked for `Type::member` and found more segments"
            ));
        };
        if !self.type_named(ty) {
            return Err(format!(
                "looked for a struct, enum, trait or type `{ty}` in crates/*/src and xtask/src"
            ));
        }
        if !self.member_of(ty, member) {
            return Err(format!(
                "looked for a fn, const or type `{member}` in an impl or trait of `{ty}`, or a variant `{member}` of it"
            ));
        }
        Ok(())
    }

    /// The source directory of a crate named in a path.
    fn crate_src(&self, name: &str) -> Option<String> {
        match name {
            "xtask" => Some("xtask/src".to_owned()),
            "e2e" => Some("tests/tests".to_owned()),
            _ => {
                let dir = format!("crates/{}/src", name.replace('_', "-"));
                self.repo.exists(&dir).then_some(dir)
            }
        }
    }

    fn crate_root(&self, src: &str) -> String {
        ["lib.rs", "main.rs", "e2e.rs"]
            .iter()
            .map(|f| format!("{src}/{f}"))
            .find(|f| self.repo.is_file(f))
            .unwrap_or_else(|| format!("{src}/lib.rs"))
    }

    fn crate_roots(&self) -> Vec<(String, String)> {
        self.repo
            .dirs
            .iter()
            .filter(|d| {
                d.starts_with("crates/") && d.ends_with("/src") && d.matches('/').count() == 2
            })
            .map(|src| (src.clone(), self.crate_root(src)))
            .collect()
    }

    /// The rest of a path from a module: its `dir` (where its children's files are) and
    /// `file`. The module walk goes as far as module files go; what is left is an item
    /// of the last module (or of one below it: a re-export may hide where), or a type
    /// and its member.
    fn check_in_module(&self, dir: &str, file: &str, rest: &[&str], s: &str) -> Result<(), String> {
        let mut dir = dir.to_owned();
        let mut file = file.to_owned();
        let mut i = 0;
        while let Some(next) = rest.get(i).and_then(|seg| self.module_file(&dir, seg)) {
            dir = child_dir(&next);
            file = next;
            i += 1;
        }
        let here = |name: &str| {
            let in_file = self.items.get(&file).is_some_and(|items| {
                items.reexports.contains(name) || items.defs.iter().any(|d| d.top && d.name == name)
            });
            in_file
                || self.items.iter().any(|(path, items)| {
                    under(path, &dir)
                        && (items.reexports.contains(name)
                            || items.defs.iter().any(|d| d.top && d.name == name))
                })
        };
        match &rest[i..] {
            [] => Ok(()),
            [name] if here(name) => Ok(()),
            [name] => Err(format!(
                "looked for an item or `pub use` `{name}` in {file} and the modules under {dir}/"
            )),
            [ty, member] if here(ty) && self.member_of(ty, member) => Ok(()),
            [ty, member] if here(ty) => Err(format!(
                "`{ty}` is in {file}; looked for a fn, const or variant `{member}` of it"
            )),
            [ty, _] => Err(format!(
                "looked for a module file `{dir}/{ty}.rs` or `{dir}/{ty}/mod.rs`, or a type `{ty}` in {file}"
            )),
            more => Err(format!(
                "`{s}`: no module file for `{}` under {dir}/",
                more.first().copied().unwrap_or_default()
            )),
        }
    }

    /// The file of module `name` under `dir`.
    fn module_file(&self, dir: &str, name: &str) -> Option<String> {
        [format!("{dir}/{name}.rs"), format!("{dir}/{name}/mod.rs")]
            .into_iter()
            .find(|f| self.repo.is_file(f))
    }
}

/// Where the files of a module's children are: `a/b.rs` → `a/b`, `a/mod.rs` → `a`.
fn child_dir(file: &str) -> String {
    let name = file.rsplit('/').next().unwrap_or(file);
    if ["mod.rs", "lib.rs", "main.rs", "e2e.rs"].contains(&name) {
        parent(file).to_owned()
    } else {
        file.trim_end_matches(".rs").to_owned()
    }
}

// ---------------------------------------------------------------------------------------
// Documents outside the repository.

/// Each citation in `line` (of the file in `dir`) of a document the repository does not
/// hold: a `.md` file it lacks, a numbered seed, the seeds' directory, an article the
/// project started from, a numbered rule of some other text.
fn outside_documents(repo: &Repo, dir: &str, line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices(".md") {
        if line[at + 3..].starts_with(is_ident_char) {
            continue;
        }
        let start = line[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_ident_char(*c) || "./-".contains(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let name = &line[start..at + 3];
        let stem = name
            .trim_end_matches(".md")
            .rsplit('/')
            .next()
            .unwrap_or_default();
        let url = name.starts_with("//") || line[..start].ends_with(':');
        if url || stem.is_empty() || line[..start].ends_with('*') {
            continue;
        }
        let name = name.trim_start_matches("./");
        let held = repo.is_file(&join(dir, name))
            || repo.is_file(name)
            || repo.files.keys().any(|p| p.ends_with(&format!("/{name}")));
        if !held {
            found.push(format!("`{name}` is no document of the repository"));
        }
    }
    let lower = line.to_ascii_lowercase();
    let phrases = [
        ("seeds/", "the seeds' directory is not in the repository"),
        (
            "seed article",
            "the seed articles are not in the repository",
        ),
        (
            "background article",
            "the background articles are not in the repository",
        ),
        (
            "reference article",
            "the reference article is not in the repository",
        ),
    ];
    for (phrase, why) in phrases {
        if lower.contains(phrase) {
            found.push(format!("\"{phrase}\": {why}"));
        }
    }
    for (pattern, why) in [
        ("seed ", "a numbered seed"),
        ("rule ", "a numbered rule of another text"),
    ] {
        for (at, _) in lower.match_indices(pattern) {
            let after = &lower[at + pattern.len()..];
            let digits = after.chars().take_while(char::is_ascii_digit).count();
            let numbered = if pattern == "seed " {
                digits == 3
            } else {
                digits > 0 && after[digits..].starts_with(" of ")
            };
            let word_start = !lower[..at].ends_with(char::is_alphanumeric);
            if numbered && word_start {
                let cited = &line[at..at + pattern.len() + digits];
                found.push(format!("\"{cited}\": {why}, not in the repository"));
            }
        }
    }
    found
}

/// Every citation of an outside document in the repository's Markdown files and in the
/// comments of its Rust sources: `file:line: what`.
pub(crate) fn check_outside_documents(repo: &Repo) -> Vec<String> {
    let mut failures = Vec::new();
    for (path, text) in repo.texts() {
        let lines: Vec<(usize, String)> = if path.ends_with(".md") {
            text.lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l.to_owned()))
                .collect()
        } else if is_source(path) || path == TIDY {
            lex(text).comments
        } else {
            continue;
        };
        for (n, line) in lines {
            for why in outside_documents(repo, parent(path), &line) {
                failures.push(format!("{path}:{n}: {why}"));
            }
        }
    }
    failures
}

// ---------------------------------------------------------------------------------------
// Rules of the code base.

/// The lines of a source that count toward its length: every line outside a top-level
/// `#[cfg(test)]` module, with the line number of each.
fn counted_lines(src: &str) -> Vec<usize> {
    let lines: Vec<&str> = src.lines().collect();
    let mut counted = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "#[cfg(test)]" {
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("#[") {
                j += 1;
            }
            let item = lines.get(j).copied().unwrap_or_default();
            let is_mod = item
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .starts_with("mod ");
            if is_mod {
                if item.trim_end().ends_with('{') {
                    while j < lines.len() && lines[j].trim_end() != "}" {
                        j += 1;
                    }
                }
                i = j + 1;
                continue;
            }
        }
        counted.push(i + 1);
        i += 1;
    }
    counted
}

/// Each source file of crates/*/src longer than [`MAX_LINES`], tests aside.
pub(crate) fn check_file_lengths(repo: &Repo) -> Vec<String> {
    repo.texts()
        .filter(|(path, _)| {
            path.ends_with(".rs") && is_crate_src(path) && path.starts_with("crates/")
        })
        .filter_map(|(path, text)| {
            let counted = counted_lines(text);
            let first_over = counted.get(MAX_LINES)?;
            Some(format!(
                "{path}:{first_over}: {} lines outside #[cfg(test)] modules, over the {MAX_LINES} \
                 a source file of crates/*/src may have (looked at every line outside a \
                 top-level `#[cfg(test)] mod`)",
                counted.len()
            ))
        })
        .collect()
}

/// A rule of the code base with one home: the names it may be defined under, the kinds
/// of item that define it, and whether it may also be absent.
#[derive(Debug)]
struct OneHome {
    names: &'static [&'static str],
    kinds: &'static [&'static str],
    optional: bool,
}

const CONST: &[&str] = &["const", "static"];
const FN: &[&str] = &["fn"];

/// The rules defined once in the whole code base.
const ONE_HOME: &[OneHome] = &[
    // DynamoDB's write units per second for one partition key value.
    OneHome {
        names: &["PARTITION_WCU"],
        kinds: CONST,
        optional: false,
    },
    // The readings table's key attribute names.
    OneHome {
        names: &["PK"],
        kinds: CONST,
        optional: false,
    },
    OneHome {
        names: &["SK"],
        kinds: CONST,
        optional: false,
    },
    // The longest device or event id.
    OneHome {
        names: &["MAX_ID_CHARS", "MAX_ID_LEN"],
        kinds: CONST,
        optional: false,
    },
    // The batch writer's default calls in flight (or none: the configuration's own).
    OneHome {
        names: &["DEFAULT_MAX_INFLIGHT"],
        kinds: CONST,
        optional: true,
    },
    // SQS's most entries of a batch call, and its message size.
    OneHome {
        names: &["MAX_BATCH_ENTRIES"],
        kinds: CONST,
        optional: false,
    },
    OneHome {
        names: &["MAX_MESSAGE_BYTES"],
        kinds: CONST,
        optional: false,
    },
    // Finding the repository's root.
    OneHome {
        names: &["repo_root", "find_root"],
        kinds: FN,
        optional: false,
    },
];

/// Each rule of [`ONE_HOME`] defined more than once (or never) in the Rust sources of
/// crates/, xtask/, tests/ and fuzz/.
pub(crate) fn check_one_home(repo: &Repo) -> Vec<String> {
    let sources: Vec<(&str, Items)> = repo
        .texts()
        .filter(|(path, _)| is_source(path))
        .map(|(path, text)| (path, items(text)))
        .collect();
    let mut failures = Vec::new();
    for rule in ONE_HOME {
        let homes: Vec<String> = sources
            .iter()
            .flat_map(|(path, items)| {
                items
                    .defs
                    .iter()
                    .filter(|d| {
                        rule.names.contains(&d.name.as_str()) && rule.kinds.contains(&d.kind)
                    })
                    .map(move |d| format!("{path}:{}: `{}`", d.line, d.name))
            })
            .collect();
        let allowed = if rule.optional { 0..=1 } else { 1..=1 };
        if !allowed.contains(&homes.len()) {
            let names = rule.names.join("` or `");
            let kinds = rule.kinds.join(" or ");
            if homes.is_empty() {
                failures.push(format!(
                    "(nowhere): `{names}`: looked for a {kinds} of that name in every source and found none"
                ));
            }
            for home in &homes {
                failures.push(format!(
                    "{home}: one of {} definitions of `{names}` (a {kinds}); the rule has one home",
                    homes.len()
                ));
            }
        }
    }
    failures
}

// ---------------------------------------------------------------------------------------
// Rules copied by value: a constant's number written again where the constant is meant.

/// A rule defined once as a constant: the numbers (and expressions) that write its value,
/// and the words that make one of them a copy of the rule rather than another number of
/// the same value (`1000.0` turning seconds into milliseconds is no partition's limit).
#[derive(Debug)]
struct ByValue {
    /// The constant, as code names it.
    constant: &'static str,
    /// The file that defines it.
    home: &'static str,
    /// Its value, as any number literal writes it (`1_000`, `1000.0`, `1000u32`).
    value: f64,
    /// Expressions of its value (spaces removed).
    expressions: &'static [&'static str],
    /// Words or phrases of its line, the line above it (and the comments and attributes
    /// above that), or the line after an attribute, one of which makes the number a copy.
    context: &'static [&'static str],
}

/// The rules no source of crates/*/src or xtask/src writes by value, tests aside.
const BY_VALUE: &[ByValue] = &[
    ByValue {
        constant: "sharding::key::MAX_ID_LEN",
        home: "crates/sharding/src/key.rs",
        value: 128.0,
        expressions: &[],
        context: &["id", "ids", "thing", "characters", "chars"],
    },
    ByValue {
        constant: "sharding::capacity::PARTITION_WCU",
        home: "crates/sharding/src/capacity.rs",
        value: 1000.0,
        expressions: &[],
        context: &[
            "wcu",
            "partition",
            "write unit",
            "write units",
            "write capacity",
        ],
    },
    ByValue {
        constant: "store::queue::MAX_BATCH_ENTRIES",
        home: "crates/store/src/queue.rs",
        value: 10.0,
        expressions: &[],
        context: &[
            "entries",
            "sendmessagebatch",
            "deletemessagebatch",
            "changemessagevisibilitybatch",
            "receivemessage",
            "max number of messages",
        ],
    },
    ByValue {
        constant: "store::queue::MAX_MESSAGE_BYTES",
        home: "crates/store/src/queue.rs",
        value: 262_144.0,
        expressions: &["256*1024"],
        context: &["message", "messages", "sqs", "payload"],
    },
];

/// The places that write a rule's value on purpose: (file, constant, why).
const BY_VALUE_ALLOWED: &[(&str, &str, &str)] = &[
    (
        "crates/capacity-proxy/src/main.rs",
        "sharding::capacity::PARTITION_WCU",
        "the stand-in for DynamoDB states DynamoDB's own per-key limit as its default; it \
         depends on no crate of the workspace, so it models the service, not our code",
    ),
    (
        "crates/capacity-proxy/src/capacity.rs",
        "sharding::capacity::PARTITION_WCU",
        "the stand-in's `Limits::default`, DynamoDB's per-key limit (as above)",
    ),
    (
        "xtask/src/local.rs",
        "sharding::capacity::PARTITION_WCU",
        "xtask depends on no crate of the workspace; its `--key-wcu` default is the \
         stand-in's, passed on to it",
    ),
];

/// The number literals of `text` (a line of code, or a string's contents): each one's
/// byte offset, as written, and its value. Hex, octal, binary and exponents are no
/// rule's value and are skipped.
fn number_literals(text: &str) -> Vec<(usize, &str, f64)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit()
            && (i == 0
                || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
        let mut digits_end = i;
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            digits_end = i;
        }
        let suffix_start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let suffix = &text[suffix_start..i];
        let plain = suffix.is_empty()
            || [
                "u8", "u16", "u32", "u64", "u128", "usize", "i32", "i64", "isize", "f32", "f64",
            ]
            .contains(&suffix);
        if plain && let Ok(value) = text[start..digits_end].replace('_', "").parse::<f64>() {
            out.push((start, &text[start..i], value));
        }
    }
    out
}

/// `context`'s words (lower case, runs of letters and digits) hold `term`'s.
fn says(context: &str, term: &str) -> bool {
    let words = |s: &str| -> String {
        let joined: Vec<String> = s
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        format!(" {} ", joined.join(" "))
    };
    words(context).contains(&words(term))
}

/// The text a number on line `n` (1-based) of `lines` is read in: the line, the line
/// above it with the comments and attributes right above that, and the line after it
/// when it is an attribute.
fn context_of(lines: &[&str], n: usize) -> String {
    let mut out = vec![lines[n - 1]];
    if n >= 2 {
        out.push(lines[n - 2]);
    }
    let mut k = n.saturating_sub(2);
    while k > 0 {
        let above = lines[k - 1].trim_start();
        if !(above.starts_with("//") || above.starts_with("#[")) {
            break;
        }
        out.push(above);
        k -= 1;
    }
    if lines[n - 1].trim_start().starts_with("#[")
        && let Some(next) = lines.get(n)
    {
        out.push(next);
    }
    out.join("\n")
}

/// Each number or expression in the code or strings of a non-test source of crates/*/src
/// or xtask/src that writes a rule of [`BY_VALUE`] by value, outside the rule's
/// definition and the places [`BY_VALUE_ALLOWED`] lists.
pub(crate) fn check_by_value(repo: &Repo) -> Vec<String> {
    let mut failures = Vec::new();
    for (path, text) in repo.texts() {
        if !is_crate_src(path) || extension(path) != "rs" {
            continue;
        }
        let counted: BTreeSet<usize> = counted_lines(text).into_iter().collect();
        let lines: Vec<&str> = text.lines().collect();
        let lexed = lex(text);
        // (line, literal as written, its value or None for an expression)
        let mut found: Vec<(usize, String, Option<f64>)> = Vec::new();
        for (i, line) in lexed.code.lines().enumerate() {
            for (_, written, value) in number_literals(line) {
                found.push((i + 1, written.to_owned(), Some(value)));
            }
            let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            for rule in BY_VALUE {
                for e in rule.expressions {
                    let copies = squeezed.match_indices(e).any(|(at, _)| {
                        let before = squeezed[..at].chars().next_back();
                        let after = squeezed[at + e.len()..].chars().next();
                        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                            && !matches!(after, Some('*' | '/') | Some('0'..='9'))
                    });
                    if copies {
                        found.push((i + 1, (*e).to_owned(), None));
                    }
                }
            }
        }
        for (first, contents) in &lexed.strings {
            for (at, written, value) in number_literals(contents) {
                let line = first + contents[..at].matches('\n').count();
                found.push((line, written.to_owned(), Some(value)));
            }
        }
        found.sort_by_key(|(line, ..)| *line);
        for (line, written, value) in found {
            if !counted.contains(&line) || line > lines.len() {
                continue;
            }
            let context = context_of(&lines, line);
            for rule in BY_VALUE {
                let name = rule.constant.rsplit("::").next().unwrap_or(rule.constant);
                let same = match value {
                    Some(v) => (v - rule.value).abs() < 1e-9,
                    None => rule.expressions.contains(&written.as_str()),
                };
                let Some(word) = rule.context.iter().find(|w| says(&context, w)) else {
                    continue;
                };
                let home = path == rule.home && lines[line - 1].contains(&format!("const {name}:"));
                let allowed = BY_VALUE_ALLOWED
                    .iter()
                    .any(|(p, c, _)| *p == path && *c == rule.constant);
                if same && !home && !allowed {
                    failures.push(format!(
                        "{path}:{line}: `{written}` is `{}` ({}) written by value (its line \
                         says \"{word}\"); name the constant, or list the place in \
                         BY_VALUE_ALLOWED with why",
                        rule.constant, rule.value
                    ));
                }
            }
        }
    }
    failures
}

// ---------------------------------------------------------------------------------------
// Claims the documents make about the code, checked against it.

/// The most lines README.md may have: what Shardline is, the two commands, the API and
/// deploy in brief, and links; the reference lives under [`DOCS`].
const README_MAX_LINES: usize = 250;

/// Where the fuzz targets are, one file each.
const FUZZ_TARGETS: &str = "fuzz/fuzz_targets";

/// Where the events the handlers' tests and `cargo lambda invoke` share are.
const EVENTS: &str = "events";

/// Words a document says "every event" with, about the test named before them.
const EVERY_EVENT: &[&str] = &["every event", "each event", "all events", "all the events"];

/// Number words a count of fuzz targets may be written in.
const NUMBER_WORDS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
];

/// The paragraphs, list items and table rows of a Markdown document outside fenced
/// blocks: the line each starts on, and its lines joined by spaces.
fn blocks(doc: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut fence: Option<&str> = None;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim_start();
        if let Some(marker) = fence {
            if t.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        let fenced = t.starts_with("```") || t.starts_with("~~~");
        let starts_item = t.is_empty()
            || fenced
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.starts_with('|')
            || t.starts_with('#')
            || t.split_once(". ")
                .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_digit()));
        if starts_item {
            out.extend(current.take());
        }
        if fenced {
            fence = Some(&t[..3]);
        } else if !t.is_empty() {
            match &mut current {
                Some((_, text)) => {
                    text.push(' ');
                    text.push_str(t);
                }
                None => current = Some((i + 1, t.to_owned())),
            }
        }
    }
    out.extend(current);
    out
}

/// A block cut at its backticks: (code, text) in order, code spans trimmed.
fn segments(block: &str) -> Vec<(bool, &str)> {
    block
        .split('`')
        .enumerate()
        .map(|(i, s)| (i % 2 == 1, if i % 2 == 1 { s.trim() } else { s }))
        .collect()
}

/// A number as documents write it (`7,800`, `0.5`), and the unit after it, if any.
fn stated_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.' || c == '_'))
        .unwrap_or(text.len());
    let digits = text[..end].trim_end_matches([',', '.']);
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let value: f64 = digits.replace([',', '_'], "").parse().ok()?;
    let rest = text[digits.len()..].trim_start_matches([' ', '-']);
    let unit = rest
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    Some((value, unit))
}

/// Seconds in one `unit` as documents write units of time.
fn unit_seconds(unit: &str) -> Option<f64> {
    match unit {
        "ms" => Some(0.001),
        "s" | "sec" | "secs" | "second" | "seconds" => Some(1.0),
        "min" | "minute" | "minutes" => Some(60.0),
        "h" | "hour" | "hours" => Some(3600.0),
        "d" | "day" | "days" => Some(86_400.0),
        _ => None,
    }
}

/// The value a document states for a variable named `name`, in the variable's own unit
/// (its `_SECS`, `_MS` or `_DAYS` suffix); `None` when the units do not convert.
fn in_own_unit(name: &str, value: f64, unit: &str) -> Option<f64> {
    let own = if name.ends_with("_MS") {
        "ms"
    } else if name.ends_with("_SECS") {
        "s"
    } else if name.ends_with("_DAYS") {
        "d"
    } else {
        return (unit_seconds(unit).is_none()).then_some(value);
    };
    match unit_seconds(unit) {
        Some(per) => Some(value * per / unit_seconds(own)?),
        None => Some(value),
    }
}

/// A Lambda function, as documents name it, and the sources that read its variables.
#[derive(Debug)]
struct Function {
    name: &'static str,
    /// The words of prose that name it.
    words: &'static [&'static str],
    /// The files or directories whose reads of a variable are its.
    sources: &'static [&'static str],
}

/// The functions a variable may have a default of its own in. The writers' settings
/// (crates/store/src/config.rs) are the ingest's.
const FUNCTIONS: &[Function] = &[
    Function {
        name: "ingest",
        words: &["ingest", "writer", "writers"],
        sources: &["crates/ingest/src", "crates/store/src/config.rs"],
    },
    Function {
        name: "query",
        words: &["query", "reader", "readers"],
        sources: &["crates/query/src"],
    },
    Function {
        name: "sealer",
        words: &["sealer"],
        sources: &["crates/sealer/src"],
    },
];

/// The function whose sources hold `path`, if any.
fn function_of(path: &str) -> Option<&'static str> {
    FUNCTIONS
        .iter()
        .find(|f| f.sources.iter().any(|s| under(path, s)))
        .map(|f| f.name)
}

/// The function the prose of `segs` names nearest the code span `i`: the last one named
/// before it, else the first after it.
fn function_near(segs: &[(bool, &str)], i: usize) -> Option<&'static str> {
    let named = |text: &str| -> Vec<&'static str> {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|word| {
                let word = word.to_ascii_lowercase();
                FUNCTIONS
                    .iter()
                    .find(|f| f.words.contains(&word.as_str()))
                    .map(|f| f.name)
            })
            .collect()
    };
    let prose = |k: &usize| !segs[*k].0;
    (0..i)
        .rev()
        .filter(prose)
        .find_map(|k| named(segs[k].1).last().copied())
        .or_else(|| {
            (i + 1..segs.len())
                .filter(prose)
                .find_map(|k| named(segs[k].1).first().copied())
        })
}

/// A default the code reads a variable with (or a constant's value), and the function
/// whose source reads it.
#[derive(Debug, Clone, Copy)]
struct CodeDefault {
    value: f64,
    function: Option<&'static str>,
}

/// The default of each environment variable the code reads with a number written where
/// it is read (`parse_or("FANOUT_MAX", 32, ..)`, `number("QUERY_CONCURRENCY", 32)`),
/// and of each constant whose value is a number: name to the values found, each with
/// the function that reads it.
fn code_defaults(repo: &Repo) -> BTreeMap<String, Vec<CodeDefault>> {
    let mut found: BTreeMap<String, Vec<CodeDefault>> = BTreeMap::new();
    let mut by_constant = Vec::new();
    for (path, text) in repo.texts().filter(|(p, _)| is_crate_src(p)) {
        let function = function_of(path);
        // `"NAME", 123`: a variable read with its default beside it.
        for (at, _) in text.match_indices('"') {
            let rest = &text[at + 1..];
            let Some(close) = rest.find('"') else {
                continue;
            };
            let name = &rest[..close];
            if !is_screaming(name) {
                continue;
            }
            let after = rest[close + 1..].trim_start();
            let Some(after) = after.strip_prefix(',') else {
                continue;
            };
            let after = after.trim_start();
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(after.len());
            let literal = after[..end].trim_end_matches('.');
            if literal.starts_with(|c: char| c.is_ascii_digit())
                && let Ok(value) = literal.replace('_', "").parse::<f64>()
            {
                found
                    .entry(name.to_owned())
                    .or_default()
                    .push(CodeDefault { value, function });
            } else if is_screaming(literal) {
                // `"NAME", DEFAULT_NAME`: the constant's value, once every constant is read.
                by_constant.push((name.to_owned(), literal.to_owned(), function));
            }
        }
        // `const NAME: T = 123;`
        for line in text.lines() {
            let line = line.trim_start().trim_start_matches("pub ");
            let line = line
                .strip_prefix("pub(crate) ")
                .unwrap_or(line)
                .trim_start();
            let Some(rest) = line.strip_prefix("const ") else {
                continue;
            };
            let Some((name, rest)) = rest.split_once(':') else {
                continue;
            };
            let Some((_, value)) = rest.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_end_matches(';').replace('_', "");
            if is_screaming(name.trim())
                && let Ok(value) = value.parse::<f64>()
            {
                found
                    .entry(name.trim().to_owned())
                    .or_default()
                    .push(CodeDefault { value, function });
            }
        }
    }
    for (name, constant, function) in by_constant {
        let values: Vec<f64> = found
            .get(&constant)
            .map(|c| c.iter().map(|d| d.value).collect())
            .unwrap_or_default();
        if let [value] = values[..] {
            found
                .entry(name)
                .or_default()
                .push(CodeDefault { value, function });
        }
    }
    found
}

/// Each parameter of template.yaml with its `Default`, as written (quotes removed).
fn template_defaults(template: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut section = "";
    let mut parameter: Option<String> = None;
    for line in template.lines().map(without_hash_comment) {
        if !line.starts_with(' ') && line.contains(':') {
            section = line.split(':').next().unwrap_or("");
            continue;
        }
        if section != "Parameters" {
            continue;
        }
        if line.starts_with("  ") && !line.starts_with("   ") {
            parameter = line.trim().strip_suffix(':').map(str::to_owned);
        } else if let (Some(name), Some(value)) = (
            &parameter,
            line.trim().strip_prefix("Default:").map(str::trim),
        ) {
            out.insert(name.clone(), value.trim_matches(['"', '\'']).to_owned());
        }
    }
    out
}

/// The commands of a binary: the variants of the `Command` enum of its main.rs, as clap
/// names them.
fn binary_commands(main: &str) -> BTreeSet<String> {
    items(main)
        .variants
        .into_iter()
        .filter(|(e, _)| e == "Command")
        .map(|(_, v)| kebab(&v))
        .collect()
}

/// What the claims are checked against.
#[derive(Debug)]
pub(crate) struct Facts<'r> {
    repo: &'r Repo,
    code_defaults: BTreeMap<String, Vec<CodeDefault>>,
    template_defaults: BTreeMap<String, String>,
    fuzz_targets: BTreeSet<String>,
    events: BTreeSet<String>,
}

impl<'r> Facts<'r> {
    pub(crate) fn new(repo: &'r Repo) -> Self {
        let stems = |dir: &str, ext: &str| -> BTreeSet<String> {
            repo.files
                .keys()
                .filter(|p| parent(p) == dir)
                .filter_map(|p| p.rsplit('/').next()?.strip_suffix(ext).map(str::to_owned))
                .collect()
        };
        Self {
            repo,
            code_defaults: code_defaults(repo),
            template_defaults: repo
                .text("template.yaml")
                .map(template_defaults)
                .unwrap_or_default(),
            fuzz_targets: stems(FUZZ_TARGETS, ".rs"),
            events: stems(EVENTS, ".json")
                .into_iter()
                .map(|stem| format!("{stem}.json"))
                .collect(),
        }
    }

    /// Every claim of `text` (the document `file`) the code contradicts:
    /// `file:line: what`.
    pub(crate) fn check_document(&self, file: &str, text: &str) -> Vec<String> {
        let mut failures = Vec::new();
        for (line, block) in blocks(text) {
            let found = [
                self.check_commands(&block),
                self.check_fuzz_targets(&block),
                self.check_events(&block),
                self.check_defaults(&block),
                self.check_default_column(&block, text, line),
            ];
            for why in found.into_iter().flatten() {
                failures.push(format!("{file}:{line}: {why}"));
            }
        }
        failures
    }

    /// A list item or table row about a binary's crate (its first code span) that names
    /// two or more of its commands names them all: a listing that leaves one out reads
    /// as the whole of it.
    fn check_commands(&self, block: &str) -> Vec<String> {
        let codes: Vec<&str> = segments(block)
            .into_iter()
            .filter_map(|(code, s)| code.then_some(s))
            .collect();
        let item = block.starts_with("- ") || block.starts_with('|');
        let Some(krate) = codes.first().filter(|_| item) else {
            return Vec::new();
        };
        let Some(main) = self.repo.text(&format!("{krate}/src/main.rs")) else {
            return Vec::new();
        };
        let commands = binary_commands(main);
        let binary = krate.rsplit('/').next().unwrap_or(krate);
        let named: BTreeSet<String> = codes[1..]
            .iter()
            .filter_map(|s| {
                let s = s
                    .strip_prefix("cargo xtask ")
                    .or_else(|| s.strip_prefix(&format!("{binary} ")))
                    .unwrap_or(s);
                s.split_whitespace().next()
            })
            .flat_map(|word| word.split('|'))
            .filter(|word| commands.contains(*word))
            .map(str::to_owned)
            .collect();
        let left_out: Vec<&str> = commands
            .iter()
            .filter(|c| !named.contains(*c))
            .map(String::as_str)
            .collect();
        if named.len() >= 2 && !left_out.is_empty() {
            vec![format!(
                "`{krate}`: names {} of the {} commands of {krate}/src/main.rs (its `Command` \
                 enum) and leaves out `{}`; a list of them names them all",
                named.len(),
                commands.len(),
                left_out.join("`, `")
            )]
        } else {
            Vec::new()
        }
    }

    /// A passage about the fuzz targets that names one names them all, and a count of
    /// them is theirs.
    fn check_fuzz_targets(&self, block: &str) -> Vec<String> {
        let lower = block.to_ascii_lowercase();
        if !lower.contains("fuzz target") {
            return Vec::new();
        }
        let mut failures = Vec::new();
        let all = &self.fuzz_targets;
        let named: BTreeSet<&str> = segments(block)
            .into_iter()
            .filter_map(|(code, s)| code.then_some(s))
            .map(|s| {
                let name = s.rsplit('/').next().unwrap_or(s);
                name.strip_suffix(".rs").unwrap_or(name)
            })
            .filter(|s| all.contains(*s))
            .collect();
        let left_out: Vec<&str> = all
            .iter()
            .map(String::as_str)
            .filter(|t| !named.contains(t))
            .collect();
        if !named.is_empty() && !left_out.is_empty() {
            failures.push(format!(
                "names {} of the {} fuzz targets of {FUZZ_TARGETS}/ and leaves out `{}`",
                named.len(),
                all.len(),
                left_out.join("`, `")
            ));
        }
        for (at, _) in lower.match_indices(" fuzz targets") {
            let Some(word) = lower[..at].split_whitespace().next_back() else {
                continue;
            };
            let count = word
                .parse::<usize>()
                .ok()
                .or_else(|| NUMBER_WORDS.iter().position(|w| *w == word));
            if count.is_some_and(|c| c != all.len()) {
                failures.push(format!(
                    "\"{word} fuzz targets\": {FUZZ_TARGETS}/ holds {}",
                    all.len()
                ));
            }
        }
        failures
    }

    /// Events a test is said to run are events it names: each event file named after a
    /// test file (or, with none before it, before one) is in that test's text, and a
    /// test said to run every event names every file of events/ or reads the directory.
    fn check_events(&self, block: &str) -> Vec<String> {
        let segs = segments(block);
        let is_test = |s: &str| {
            s.ends_with(".rs")
                && (under(s, "tests") || s.split('/').nth(2) == Some("tests"))
                && self.repo.is_file(s)
        };
        let tests: Vec<usize> = (0..segs.len())
            .filter(|&i| segs[i].0 && is_test(segs[i].1))
            .collect();
        // The sentence of each segment: a prose segment holding ". " ends one.
        let mut sentence = Vec::with_capacity(segs.len());
        let mut n = 0;
        for (code, s) in &segs {
            sentence.push(n);
            if !code && s.contains(". ") {
                n += 1;
            }
        }
        // The test a segment is said of: the one before it in its sentence, else the
        // one after it there, else the same in the whole block.
        let test_for = |i: usize| {
            let before = |same: bool| {
                tests
                    .iter()
                    .rev()
                    .find(|&&t| t < i && (!same || sentence[t] == sentence[i]))
            };
            let after = |same: bool| {
                tests
                    .iter()
                    .find(|&&t| t > i && (!same || sentence[t] == sentence[i]))
            };
            before(true)
                .or_else(|| after(true))
                .or_else(|| before(false))
                .or_else(|| after(false))
                .map(|&t| segs[t].1)
        };
        let reads_dir = |text: &str| text.contains("read_dir") && text.contains("\"events");
        let mut failures = Vec::new();
        for (i, (code, s)) in segs.iter().enumerate() {
            let Some(test) = test_for(i) else {
                continue;
            };
            let text = self.repo.text(test).unwrap_or_default();
            if *code {
                let name = s.strip_prefix("events/").unwrap_or(s);
                if !name.ends_with(".json") || name.contains('/') {
                    continue;
                }
                if name.contains('*') {
                    let pattern = name.replace('*', "{}");
                    let matching: Vec<&String> = self
                        .events
                        .iter()
                        .filter(|e| matches_holes(&pattern, e))
                        .collect();
                    let missing: Vec<&str> = matching
                        .iter()
                        .filter(|e| !text.contains(e.as_str()))
                        .map(|e| e.as_str())
                        .collect();
                    if !matching.is_empty() && !missing.is_empty() && !reads_dir(text) {
                        failures.push(format!(
                            "`{s}`: {test} neither reads {EVENTS}/ nor names `{}`",
                            missing.join("`, `")
                        ));
                    }
                } else if self.events.contains(name) && !text.contains(name) && !reads_dir(text) {
                    failures.push(format!("`{s}`: said of {test}, which does not name it"));
                }
            } else {
                let lower = s.to_ascii_lowercase();
                let claimed = EVERY_EVENT.iter().find(|p| lower.contains(*p));
                let missing: Vec<&str> = self
                    .events
                    .iter()
                    .filter(|e| !text.contains(e.as_str()))
                    .map(String::as_str)
                    .collect();
                if let Some(phrase) = claimed
                    && !missing.is_empty()
                    && !reads_dir(text)
                {
                    failures.push(format!(
                        "\"{phrase}\" of {test}: it neither reads {EVENTS}/ nor names `{}`",
                        missing.join("`, `")
                    ));
                }
            }
        }
        failures
    }

    /// A default stated beside a name in prose (`` `FANOUT_MAX` (32) ``,
    /// `` `REDELIVERY_BASE_SECS` = 30 ``, `` (`SHARD_CACHE_TTL_SECS`, 5 s) ``,
    /// `` `SealLagThreshold` (7,800 s) ``) is the code's: the number written where the
    /// variable is read or the constant defined, or the template parameter's `Default`.
    fn check_defaults(&self, block: &str) -> Vec<String> {
        let segs = segments(block);
        let mut failures = Vec::new();
        for i in (1..segs.len().saturating_sub(1)).filter(|&i| segs[i].0) {
            let name = segs[i].1;
            let before = segs[i - 1].1.trim_end();
            let after = segs[i + 1].1;
            // A term of a sum (`A` + `B` = 365 s) states no default of its own.
            if before.ends_with(['+', '-', '*', '/']) || after.trim_start().starts_with('+') {
                continue;
            }
            let stated = after
                .strip_prefix(" (")
                .or_else(|| after.strip_prefix(" = "))
                .or_else(|| after.strip_prefix(", ").filter(|_| before.ends_with('(')));
            let Some((value, unit)) = stated.and_then(stated_number) else {
                continue;
            };
            let function = function_near(&segs, i);
            if let Some(why) = self.default_differs(name, value, unit, function) {
                failures.push(format!("`{name}`: {why}"));
            }
        }
        failures
    }

    /// Why `value` (in `unit`) is not the default of `name`, if the code says: the
    /// default of `function` (the function the passage names) when each function reads
    /// the variable with a default of its own.
    fn default_differs(
        &self,
        name: &str,
        value: f64,
        unit: &str,
        function: Option<&str>,
    ) -> Option<String> {
        if is_screaming(name) {
            let defaults = self.code_defaults.get(name)?;
            let stated = in_own_unit(name, value, unit)?;
            let equal = |d: f64| (d - stated).abs() <= 1e-9 * d.abs().max(1.0);
            let states = format!(
                "the text states {value}{}",
                if unit.is_empty() {
                    String::new()
                } else {
                    format!(" {unit}")
                }
            );
            let first = defaults.first()?.value;
            let per_function = defaults.iter().any(|d| d.value != first);
            if !per_function {
                return (!equal(first)).then(|| {
                    format!("{states}, and the default the code reads it with is {first}")
                });
            }
            let each = defaults
                .iter()
                .map(|d| format!("{} ({})", d.value, d.function.unwrap_or("elsewhere")))
                .collect::<Vec<_>>()
                .join(", ");
            let Some(function) = function else {
                return Some(format!(
                    "{states} and names no function, and each function reads it with a \
                     default of its own: {each}"
                ));
            };
            let its: Vec<f64> = defaults
                .iter()
                .filter(|d| d.function == Some(function))
                .map(|d| d.value)
                .collect();
            return (!its.iter().any(|d| equal(*d))).then(|| {
                if its.is_empty() {
                    format!("{states} for the {function}, which does not read it: {each}")
                } else {
                    format!(
                        "{states} for the {function}, and the default the {function} reads it \
                         with is {}",
                        its.iter()
                            .map(f64::to_string)
                            .collect::<Vec<_>>()
                            .join(" or ")
                    )
                }
            });
        }
        let default = self.template_defaults.get(name)?;
        let number: f64 = default.parse().ok()?;
        ((number - value).abs() > 1e-9)
            .then(|| format!("the text states {value}, and template.yaml's `Default` is {default}"))
    }

    /// A table row under a `default` column: each name of its first cell has the default
    /// its default cell gives in the same place (`` `A`, `B` | `1`, empty ``).
    fn check_default_column(&self, block: &str, doc: &str, line: usize) -> Vec<String> {
        if !block.starts_with('|') {
            return Vec::new();
        }
        // The header: the nearest line above this row that is not a row of the body.
        let lines: Vec<&str> = doc.lines().collect();
        let mut header = None;
        for k in (0..line.saturating_sub(1)).rev() {
            let l = lines[k].trim();
            if !l.starts_with('|') {
                break;
            }
            if !l.starts_with("|-") && !l.starts_with("|:") && !l.starts_with("| -") {
                header = Some(l);
            }
        }
        let cells = |row: &str| -> Vec<String> {
            row.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        };
        let Some(header) = header.map(cells) else {
            return Vec::new();
        };
        let Some(column) = header.iter().position(|h| h == "default") else {
            return Vec::new();
        };
        let row = cells(block);
        let (Some(names), Some(defaults)) = (row.first(), row.get(column)) else {
            return Vec::new();
        };
        let names: Vec<&str> = segments(names)
            .into_iter()
            .filter_map(|(code, s)| code.then_some(s))
            .collect();
        // The function the row names (in a cell of its own, or its description).
        let row_segments = segments(block);
        let function = function_near(&row_segments, 0);
        let defaults: Vec<String> = defaults
            .split(", ")
            .map(|d| match segments(d).into_iter().find(|(code, _)| *code) {
                Some((_, s)) => s.to_owned(),
                None if d.trim() == "empty" => String::new(),
                None => d.trim().to_owned(),
            })
            .collect();
        if names.len() != defaults.len() {
            return Vec::new();
        }
        let mut failures = Vec::new();
        for (name, stated) in names.iter().zip(&defaults) {
            if let Some(default) = self.template_defaults.get(*name) {
                if default != stated && default.replace(',', "") != stated.replace(',', "") {
                    failures.push(format!(
                        "`{name}`: the default column says `{stated}`, and template.yaml's \
                         `Default` is `{default}`"
                    ));
                }
            } else if let Some((value, unit)) = stated_number(stated)
                && let Some(why) = self.default_differs(name, value, unit, function)
            {
                failures.push(format!("`{name}`: {why}"));
            }
        }
        failures
    }
}

/// Every claim of the naming documents the code contradicts, and README.md longer than
/// [`README_MAX_LINES`].
pub(crate) fn check_claims(repo: &Repo) -> Vec<String> {
    let facts = Facts::new(repo);
    let mut failures = Vec::new();
    for doc in naming_documents(repo) {
        failures.extend(facts.check_document(doc, repo.text(doc).unwrap_or_default()));
    }
    let readme = repo.text("README.md").unwrap_or_default().lines().count();
    if readme > README_MAX_LINES {
        failures.push(format!(
            "README.md:{}: {readme} lines, over the {README_MAX_LINES} it may have: move \
             reference text to a page under {DOCS}/",
            README_MAX_LINES + 1
        ));
    }
    failures
}

// ---------------------------------------------------------------------------------------
// The checks on this repository.

/// The documents held to what they name: [`NAMING_DOCUMENTS`], then every Markdown file
/// under [`DOCS`], found by walking it (a new page is held without being listed).
fn naming_documents(repo: &Repo) -> Vec<&str> {
    let pages = repo
        .files
        .keys()
        .map(String::as_str)
        .filter(|path| under(path, DOCS) && path.ends_with(".md"));
    NAMING_DOCUMENTS.iter().copied().chain(pages).collect()
}

fn workspace() -> Repo {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    Repo::load(manifest.parent().unwrap_or(manifest))
}

fn report(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn documents_name_what_exists() {
    let repo = workspace();
    let code = Code::new(&repo);
    let mut failures = Vec::new();
    for doc in naming_documents(&repo) {
        let text = repo.text(doc).unwrap_or_default();
        assert!(!text.is_empty(), "{doc} is missing or empty");
        failures.extend(code.check_document(doc, text));
    }
    report(
        "paths and symbols of ARCHITECTURE.md, README.md and docs/",
        &failures,
    );
}

#[test]
fn documents_claim_what_the_code_holds() {
    report(
        "claims of ARCHITECTURE.md, README.md and docs/",
        &check_claims(&workspace()),
    );
}

#[test]
fn no_document_outside_the_repository_is_cited() {
    report(
        "citations of documents outside the repository",
        &check_outside_documents(&workspace()),
    );
}

/// The workspace's locks are `parking_lot`'s, which do not poison, so no crate keeps
/// a helper of its own to take a lock past a poisoned one (there were six, each with its
/// reason in a comment): a `PoisonError` or a `fn lock` in a crate's source fails.
fn check_no_poison_helpers(repo: &Repo) -> Vec<String> {
    let mut failures = Vec::new();
    for (path, text) in repo.texts() {
        if !is_crate_src(path) || extension(path) != "rs" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("PoisonError") || code.contains("fn lock") {
                failures.push(format!(
                    "{path}:{}: a lock helper past a poisoned mutex; use parking_lot::Mutex",
                    n + 1
                ));
            }
        }
    }
    failures
}

#[test]
fn mutexes_need_no_poison_helper() {
    report("lock helpers", &check_no_poison_helpers(&workspace()));
}

#[test]
fn a_poison_helper_fails() {
    let repo = Repo::from_files(&[(
        "crates/x/src/lib.rs",
        "fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {\n    m.lock().unwrap_or_else(PoisonError::into_inner)\n}\n",
    )]);
    assert_eq!(check_no_poison_helpers(&repo).len(), 2);
}

#[test]
fn source_files_stay_short() {
    report(
        "source files of crates/*/src",
        &check_file_lengths(&workspace()),
    );
}

#[test]
fn each_shared_rule_has_one_home() {
    report("rules defined once", &check_one_home(&workspace()));
}

#[test]
fn no_rule_is_copied_by_value() {
    report("rules copied by value", &check_by_value(&workspace()));
}

// ---------------------------------------------------------------------------------------
// The checks on made-up documents and sources.

/// A small made-up repository.
fn fixture() -> Repo {
    Repo::from_files(&[
        (
            "Cargo.toml",
            "[workspace.dependencies]\nserde_json = \"1\"\n",
        ),
        ("crates/store/Cargo.toml", "[package]\nname = \"store\"\n"),
        (
            "crates/store/src/lib.rs",
            "//! The store.\npub mod batch;\npub mod directory;\npub use batch::{Slots, Writer as BatchWriter};\n",
        ),
        (
            "crates/store/src/batch.rs",
            "pub const MAX_INFLIGHT: usize = 16;\n\
             pub struct Slots { n: usize }\n\
             impl Slots {\n    pub fn take(&self) -> usize { self.n }\n}\n\
             pub enum Outcome {\n    Written,\n    Failed(String),\n}\n\
             pub struct Writer;\n\
             #[cfg(test)]\nmod tests {\n    fn helper() {}\n}\n",
        ),
        (
            "crates/store/src/directory.rs",
            "pub mod hot;\nmod cached;\npub use cached::Cached;\n",
        ),
        (
            "crates/store/src/directory/cached.rs",
            "pub struct Cached;\n",
        ),
        (
            "crates/store/src/directory/hot.rs",
            "pub fn hot_hours() -> &'static str { \"hot#\" }\n",
        ),
        ("crates/shardline-local/src/lib.rs", "pub mod demo;\n"),
        (
            "crates/shardline-local/src/demo/mod.rs",
            "pub struct Scenario;\n",
        ),
        ("crates/query/src/lib.rs", "pub mod stats;\n"),
        (
            "crates/query/src/stats.rs",
            "pub fn page() { let _ = std::env::var(\"STATS_MAX_SECS\"); }\n",
        ),
        (
            "template.yaml",
            "Parameters:\n  TimeIndex:\n    Type: String\n",
        ),
        ("docs/reliability.md", "# Reliability\n"),
        ("bench/REPORT.md", "# Report\n"),
        (
            "crates/store/tests/batch.rs",
            "#[test]\nfn writes_once() {}\nmod exact {\n    #[test]\n    fn sums_stay_exact() {}\n}\n",
        ),
    ])
}

fn failures_of(doc: &str) -> Vec<String> {
    let repo = fixture();
    Code::new(&repo).check_document("ARCHITECTURE.md", doc)
}

#[test]
fn a_made_up_path_fails() {
    let doc = "# Architecture\n\n\
               - `crates/store` — the batch writer (`batch.rs`) and the hot index\n  \
               (`directory/cold.rs`).\n\
               - `crates/ledger` — where readings are counted.\n\
               - `bench/REPORT.md` has the figures; see also `docs/figures.md`.\n";
    let failures = failures_of(doc);
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(
        failures[0].starts_with("ARCHITECTURE.md:4: `directory/cold.rs`: "),
        "{failures:#?}"
    );
    assert!(failures[0].contains("under crates/store"), "{failures:#?}");
    assert!(
        failures[1].starts_with("ARCHITECTURE.md:5: `crates/ledger`: "),
        "{failures:#?}"
    );
    assert!(
        failures[2].starts_with("ARCHITECTURE.md:6: `docs/figures.md`: "),
        "{failures:#?}"
    );
    // A short form is looked for under the crate of its passage only.
    let elsewhere = failures_of("- `crates/query` — pages (`batch.rs`).\n");
    assert_eq!(elsewhere.len(), 1, "{elsewhere:#?}");
}

#[test]
fn a_made_up_symbol_fails() {
    let doc = "The writer's `store::batch::Lots`, `store::ledger::Slots`, `Slots::give`,\n\
               `Ledger::take`, `Outcome::Lost`, `store::Remake`, `LEDGER_MAX`, `Ledger`\n\
               and `count_all(readings)`.\n";
    let failures = failures_of(doc);
    let spans: Vec<&str> = failures
        .iter()
        .filter_map(|f| f.split('`').nth(1))
        .collect();
    assert_eq!(
        spans,
        [
            "store::batch::Lots",
            "store::ledger::Slots",
            "Slots::give",
            "Ledger::take",
            "Outcome::Lost",
            "store::Remake",
            "LEDGER_MAX",
            "Ledger",
            "count_all(readings)",
        ],
        "{failures:#?}"
    );
    assert!(
        failures.iter().all(|f| f.starts_with("ARCHITECTURE.md:")),
        "{failures:#?}"
    );
    assert!(
        failures[0].contains("crates/store/src/batch.rs"),
        "{failures:#?}"
    );
}

#[test]
fn real_names_pass() {
    let doc = "# Architecture\n\n\
               - `crates/store` — the writer (`batch.rs`, `store::batch::Slots`,\n  \
               `Slots::take`, `MAX_INFLIGHT` slots, `store::BatchWriter`), the hot index\n  \
               (`directory/hot.rs`, `store::directory::Cached`, `store::directory::hot`),\n  \
               outcomes (`Outcome::Written`, `store::batch::Outcome::Failed`).\n\
               - `crates/query` — stats pages (`stats.rs`, `query::stats::page`,\n  \
               `STATS_MAX_SECS`, `[ts, ts + STATS_MAX_SECS]`).\n\n\
               The `TimeIndex` parameter (`TimeIndex=enabled`); `ScannedCount` items;\n\
               `serde_json::Value`; `{s}#{bucket}` keys; `cargo test -p store`;\n\
               `hot_hours()`, `store::directory::hot::hot_hours`, `shardline-local::demo::Scenario`,\n\
               `shardline_local::demo`; `docs/reliability.md` and\n\
               [the report](bench/REPORT.md).\n\n\
               ```sh\ncargo run -- --file crates/store/src/batch.rs\n```\n";
    let failures = failures_of(doc);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_fn_of_a_file_resolves_and_a_made_up_one_fails() {
    let doc = "Proved by `crates/store/tests/batch.rs::writes_once`, `::exact::sums_stay_exact`\n\
               and `::..._elsewhere`; not by `::writes_twice` or\n\
               `crates/store/tests/ledger.rs::counts`.\n\n\
               A `::stray` test.\n";
    let failures = failures_of(doc);
    let spans: Vec<&str> = failures
        .iter()
        .filter_map(|f| f.split('`').nth(1))
        .collect();
    assert_eq!(
        spans,
        [
            "::writes_twice",
            "crates/store/tests/ledger.rs::counts",
            "::stray"
        ],
        "{failures:#?}"
    );
    assert!(
        failures[0].ends_with("looked for a fn `writes_twice` in crates/store/tests/batch.rs"),
        "{failures:#?}"
    );
}

#[test]
fn every_page_under_docs_is_a_naming_document() {
    let mut repo = fixture();
    repo.add("docs/deep/formats.md", Some("# Formats\n".to_owned()));
    repo.add("docs/notes.txt", Some("not a page".to_owned()));
    assert_eq!(
        naming_documents(&repo),
        [
            "ARCHITECTURE.md",
            "README.md",
            "docs/deep/formats.md",
            "docs/reliability.md",
        ]
    );
}

/// A made-up repository for the claims: a binary with commands, fuzz targets, events,
/// a test that runs some of them, defaults in the code and in the template.
fn claims_fixture() -> Repo {
    Repo::from_files(&[
        (
            "crates/shardline/src/main.rs",
            "#[derive(Subcommand)]\nenum Command {\n    Plan(A),\n    Fanout(B),\n    Audit(C),\n    Blocks(D),\n}\nenum Other { Quiet }\n",
        ),
        ("fuzz/fuzz_targets/message_parser.rs", "fn f() {}\n"),
        ("fuzz/fuzz_targets/block_decoder.rs", "fn f() {}\n"),
        ("events/sqs-single.json", "{}"),
        ("events/sqs-iot.json", "{}"),
        ("events/apigw-stats.json", "{}"),
        (
            "tests/tests/lambda.rs",
            "const RUN: [&str; 2] = [\"sqs-single.json\", \"apigw-stats.json\"];\n",
        ),
        (
            "crates/ingest/tests/front_door.rs",
            "const EVENT: &str = \"sqs-iot.json\";\n",
        ),
        (
            "crates/query/tests/openapi.rs",
            "fn all() { for e in std::fs::read_dir(\"events\") {} }\n",
        ),
        (
            "crates/store/src/config.rs",
            "fn read() {\n    let m = env.parse_or(\"FANOUT_MAX\", 32, \"n\")?;\n    let c = env.parse_or(\n        \"CACHE_TTL_SECS\",\n        60,\n        \"seconds\",\n    )?;\n    let t = env.parse_or(\"SHARD_CACHE_TTL_SECS\", 60, \"s\")?;\n    let f = env.parse_or(\"MAX_FUTURE_SECS\", DEFAULT_MAX_FUTURE_SECS, \"s\")?;\n}\npub const MAX_REQUEUES: u32 = 3;\npub const DEFAULT_MAX_FUTURE_SECS: u64 = 300;\n",
        ),
        (
            "crates/query/src/config.rs",
            "fn read() {\n    let ttl = number(\"SHARD_CACHE_TTL_SECS\", 5)?;\n}\n",
        ),
        (
            "template.yaml",
            "Parameters:\n  SealLagThreshold:\n    Type: Number\n    Default: 7800\n  ApiAuth:\n    Type: String\n    Default: IAM\n  AlarmTopicArn:\n    Type: String\n    Default: ''\nResources:\n  Queue:\n    Type: AWS::SQS::Queue\n",
        ),
    ])
}

fn claims_of(doc: &str) -> Vec<String> {
    let repo = claims_fixture();
    Facts::new(&repo).check_document("docs/page.md", doc)
}

#[test]
fn a_list_of_commands_that_leaves_one_out_fails() {
    let partial = claims_of("| `crates/shardline` | the operator's: `plan`, `fanout`, `audit` |\n");
    assert_eq!(partial.len(), 1, "{partial:#?}");
    assert!(
        partial[0].starts_with("docs/page.md:1: `crates/shardline`: names 3 of the 4")
            && partial[0].contains("leaves out `blocks`"),
        "{partial:#?}"
    );
    let item = claims_of("- `crates/shardline` — `shardline plan` and `shardline audit|fanout`.\n");
    assert_eq!(item.len(), 1, "{item:#?}");
    // Every command named, or one alone, or a paragraph that is no list: no claim of all.
    for doc in [
        "| `crates/shardline` | `plan`, `fanout`, `audit`, `blocks` |\n",
        "- `crates/shardline` — `shardline plan` sizes a table.\n",
        "The `crates/shardline` commands `plan` and `audit` read the table.\n",
    ] {
        assert_eq!(claims_of(doc), Vec::<String>::new(), "{doc}");
    }
}

#[test]
fn a_fuzz_target_left_out_or_miscounted_fails() {
    let failures = claims_of("- `fuzz/` — the three fuzz targets: `message_parser`, and more.\n");
    assert_eq!(
        failures,
        [
            "docs/page.md:1: names 1 of the 2 fuzz targets of fuzz/fuzz_targets/ and leaves out `block_decoder`",
            "docs/page.md:1: \"three fuzz targets\": fuzz/fuzz_targets/ holds 2",
        ]
    );
    let whole = "- `fuzz/` — the two fuzz targets: `message_parser`, `block_decoder.rs`.\n\n\
                 Each fuzz target runs 10 s; 2 fuzz targets in all.\n";
    assert_eq!(claims_of(whole), Vec::<String>::new());
}

#[test]
fn an_event_a_test_does_not_run_fails() {
    let failures = claims_of(
        "`tests/tests/lambda.rs` runs this for every event in `events/`: `sqs-single.json`,\n\
         `sqs-iot.json` and `apigw-stats.json`.\n",
    );
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures[0].starts_with("docs/page.md:1: \"every event\" of tests/tests/lambda.rs")
            && failures[0].ends_with("nor names `sqs-iot.json`"),
        "{failures:#?}"
    );
    assert_eq!(
        failures[1],
        "docs/page.md:1: `sqs-iot.json`: said of tests/tests/lambda.rs, which does not name it"
    );
    // Named events it runs, a test after the events it runs, a test that reads events/.
    for doc in [
        "`tests/tests/lambda.rs` runs `sqs-single.json` and `apigw-stats.json`.\n",
        "- the others (`sqs-iot.json`): `crates/ingest/tests/front_door.rs`.\n",
        "`crates/query/tests/openapi.rs` checks each `events/apigw-*.json`, every event.\n",
        "`tests/tests/lambda.rs` runs the events it names. The front door's, `sqs-iot.json`,\n\
         goes through `crates/ingest/tests/front_door.rs`.\n",
    ] {
        assert_eq!(claims_of(doc), Vec::<String>::new(), "{doc}");
    }
}

#[test]
fn a_default_the_code_does_not_have_fails() {
    let doc = "Raised up to `FANOUT_MAX` (16), cached for `CACHE_TTL_SECS` (2 min), requeued\n\
               `MAX_REQUEUES` = 3 times, lagging `SealLagThreshold` (7,200 s) at most.\n\n\
               | parameter | default | what |\n|---|---|---|\n\
               | `ApiAuth`, `AlarmTopicArn` | `JWT`, empty | auth |\n\
               | `SealLagThreshold` | `7800` | lag |\n\n\
               | variable | default | bounds |\n|---|---|---|\n| `FANOUT_MAX` | 32 | keys |\n";
    let failures = claims_of(doc);
    let spans: Vec<&str> = failures
        .iter()
        .filter_map(|f| f.split('`').nth(1))
        .collect();
    assert_eq!(
        spans,
        [
            "FANOUT_MAX",
            "CACHE_TTL_SECS",
            "SealLagThreshold",
            "ApiAuth"
        ],
        "{failures:#?}"
    );
    assert!(failures[1].contains("states 2 min"), "{failures:#?}");
    assert!(failures[3].ends_with("`Default` is `IAM`"), "{failures:#?}");
    // A term of a sum, a value the code does not write down, a unit that converts.
    let fine = "A margin (`CACHE_TTL_SECS` + `MAX_FUTURE_SECS` = 365 s); `QUERY_MAX_QUERIES`\n\
                (2,000); `CACHE_TTL_SECS` (1 min); `FANOUT_MAX` = 32.\n";
    assert_eq!(claims_of(fine), Vec::<String>::new());
    // A default read through a constant is the constant's value.
    assert_eq!(
        claims_of("`MAX_FUTURE_SECS` (5 min)\n"),
        Vec::<String>::new()
    );
    let through_constant = claims_of("`MAX_FUTURE_SECS` (200 s)\n");
    assert_eq!(through_constant.len(), 1, "{through_constant:#?}");
}

#[test]
fn a_default_of_another_function_fails() {
    let doc = "The query caches shard metadata (`SHARD_CACHE_TTL_SECS`, 60 s).\n\n\
               The ingest trusts its cache (`SHARD_CACHE_TTL_SECS`, 5 s).\n\n\
               A cache (`SHARD_CACHE_TTL_SECS`, 5 s) somewhere.\n\n\
               | variable | function | default |\n|---|---|---|\n\
               | `SHARD_CACHE_TTL_SECS` | query | 60 s |\n\
               | `SHARD_CACHE_TTL_SECS` | sealer | 5 s |\n";
    let failures = claims_of(doc);
    assert_eq!(
        failures,
        [
            "docs/page.md:1: `SHARD_CACHE_TTL_SECS`: the text states 60 s for the query, and the default the query reads it with is 5",
            "docs/page.md:3: `SHARD_CACHE_TTL_SECS`: the text states 5 s for the ingest, and the default the ingest reads it with is 60",
            "docs/page.md:5: `SHARD_CACHE_TTL_SECS`: the text states 5 s and names no function, and each function reads it with a default of its own: 5 (query), 60 (ingest)",
            "docs/page.md:9: `SHARD_CACHE_TTL_SECS`: the text states 60 s for the query, and the default the query reads it with is 5",
            "docs/page.md:10: `SHARD_CACHE_TTL_SECS`: the text states 5 s for the sealer, which does not read it: 5 (query), 60 (ingest)",
        ],
        "{failures:#?}"
    );
    // Each function's own default, in a sentence, a row or beside a writer.
    let fine = "The query caches shard metadata (`SHARD_CACHE_TTL_SECS`, 5 s); a writer's\n\
                cache (`SHARD_CACHE_TTL_SECS`, 1 min).\n\n\
                | variable | function | default |\n|---|---|---|\n\
                | `SHARD_CACHE_TTL_SECS` | ingest | 60 s |\n\
                | `SHARD_CACHE_TTL_SECS` | query | `5` |\n";
    assert_eq!(claims_of(fine), Vec::<String>::new());
}

#[test]
fn a_readme_over_its_limit_fails() {
    let mut repo = claims_fixture();
    repo.add("README.md", Some("# Shardline\n".repeat(README_MAX_LINES)));
    assert_eq!(check_claims(&repo), Vec::<String>::new());
    repo.add(
        "README.md",
        Some("# Shardline\n".repeat(README_MAX_LINES + 1)),
    );
    assert_eq!(
        check_claims(&repo),
        [
            "README.md:251: 251 lines, over the 250 it may have: move reference text to a page under docs/"
        ]
    );
}

#[test]
fn a_document_outside_the_repository_fails() {
    let mut repo = fixture();
    repo.add(
        "ARCHITECTURE.md",
        Some(
            "# Architecture\n\nThe hot index follows docs/reliability.md and bench/REPORT.md.\n\
             Keys follow STYLE.md rule 7.\nSee RELIABILITY.md.\n"
                .to_owned(),
        ),
    );
    repo.add(
        "crates/store/src/memory.rs",
        Some(
            "//! The in-memory fakes.\n\n/// The scenario of seed 001, scaled down.\n\
             pub fn fake() { let _ = \"STYLE.md\"; }\n// As rule 3 of the guide says.\n"
                .to_owned(),
        ),
    );
    let failures = check_outside_documents(&repo);
    assert_eq!(
        failures,
        [
            "ARCHITECTURE.md:4: `STYLE.md` is no document of the repository",
            "ARCHITECTURE.md:5: `RELIABILITY.md` is no document of the repository",
            "crates/store/src/memory.rs:3: \"seed 001\": a numbered seed, not in the repository",
            "crates/store/src/memory.rs:5: \"rule 3\": a numbered rule of another text, not in the repository",
        ]
    );
}

#[test]
fn the_line_counter_leaves_test_modules_out() {
    let code = "fn a() {}\n".repeat(5);
    let tests = "#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n    fn t() {\n        let _ = 1;\n    }\n}\n";
    let src = format!("{code}{tests}fn after() {{}}\n");
    assert_eq!(counted_lines(&src), [1, 2, 3, 4, 5, 13]);
    // An out-of-line test module is one line left out; cfg(test) on an item counts.
    let outline = "fn a() {}\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nfn helper() {}\n";
    assert_eq!(counted_lines(outline), [1, 4, 5]);
    // A file over the limit only through its tests passes; one over it without fails.
    let long_tests = format!(
        "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
        "fn a() {}\n".repeat(MAX_LINES),
        "    fn t() {}\n".repeat(50)
    );
    let long_code = "fn a() {}\n".repeat(MAX_LINES + 1);
    let repo = Repo::from_files(&[
        ("crates/store/src/tested.rs", long_tests.as_str()),
        ("crates/store/src/long.rs", long_code.as_str()),
    ]);
    let failures = check_file_lengths(&repo);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("crates/store/src/long.rs:801: 801 lines"),
        "{failures:#?}"
    );
}

#[test]
fn a_second_home_of_a_rule_fails() {
    let repo = Repo::from_files(&[
        (
            "crates/store/src/item.rs",
            "pub const PK: &str = \"PK\";\npub const SK: &str = \"SK\";\n",
        ),
        (
            "crates/sharding/src/capacity.rs",
            "pub const PARTITION_WCU: f64 = 1000.0;\n",
        ),
        (
            "crates/shardline/src/audit.rs",
            "const PARTITION_WCU: f64 = 1000.0;\nconst MAX_ID_LEN: usize = 128;\n",
        ),
        (
            "crates/stand-in/src/root.rs",
            "pub fn repo_root() {}\nfn uses() { let PK = 1; }\n",
        ),
        (
            "crates/store/src/queue.rs",
            "pub const MAX_BATCH_ENTRIES: usize = 10;\npub const MAX_MESSAGE_BYTES: usize = 262_144;\n",
        ),
    ]);
    let failures = check_one_home(&repo);
    assert_eq!(
        failures,
        [
            "crates/sharding/src/capacity.rs:1: `PARTITION_WCU`: one of 2 definitions of `PARTITION_WCU` (a const or static); the rule has one home",
            "crates/shardline/src/audit.rs:1: `PARTITION_WCU`: one of 2 definitions of `PARTITION_WCU` (a const or static); the rule has one home",
        ]
    );
}

#[test]
fn a_rule_copied_by_value_fails() {
    let repo = Repo::from_files(&[
        (
            "crates/sharding/src/key.rs",
            "/// The longest id.\npub const MAX_ID_LEN: usize = 128;\n",
        ),
        (
            "crates/store/src/queue.rs",
            "pub const MAX_MESSAGE_BYTES: usize = 262_144;\npub const MAX_BATCH_ENTRIES: usize = 10;\n",
        ),
        (
            "crates/shardline/src/gen.rs",
            "fn is_id(s: &str) -> bool {\n    (1..=128).contains(&s.len())\n}\n\
             /// Most entries of one `DeleteMessageBatch`.\nconst MAX_DELETE: usize = 10;\n\
             fn why() -> &'static str { \"a thing name of 1 to 128 characters\" }\n\
             /// Lambda's payload less one message.\nconst FULL: usize = 6 * 1024 * 1024 - 256 * 1024;\n\
             fn limit() {\n    let key_wcu = 1_000.0;\n}\n",
        ),
        (
            "crates/shardline/src/fine.rs",
            "/// The largest block, well under an item.\npub const MAX_BLOCK_BYTES: u32 = 256 * 1024;\n\
             fn ms(s: f64) -> f64 { s * 1000.0 }\nconst RETRIES: u32 = 10;\n\
             fn wcu() -> f64 { sharding::capacity::PARTITION_WCU }\n\
             #[cfg(test)]\nmod tests {\n    const ID: usize = 128;\n    fn id() -> String { \"a\".repeat(128) }\n}\n",
        ),
        (
            "crates/capacity-proxy/src/main.rs",
            "/// WCU per second per partition key value.\n#[arg(long, default_value_t = 1000.0)]\nkey_wcu: f64,\n",
        ),
    ]);
    let failures = check_by_value(&repo);
    let places: Vec<&str> = failures
        .iter()
        .map(|f| f.split(": ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        places,
        [
            "crates/shardline/src/gen.rs:2",
            "crates/shardline/src/gen.rs:5",
            "crates/shardline/src/gen.rs:6",
            "crates/shardline/src/gen.rs:8",
            "crates/shardline/src/gen.rs:10",
        ],
        "{failures:#?}"
    );
    assert!(
        failures[0].ends_with(
            "`128` is `sharding::key::MAX_ID_LEN` (128) written by value (its line says \"id\"); \
             name the constant, or list the place in BY_VALUE_ALLOWED with why"
        ),
        "{failures:#?}"
    );
    assert!(failures[3].contains("`256*1024` is `store::queue::MAX_MESSAGE_BYTES`"));
}

#[test]
fn the_item_reader_sees_items_methods_variants_and_reexports() {
    let src = "pub use crate::a::{B, c::D as E, f::{self}};\n\
               #[derive(Debug)]\npub enum Strategy {\n    /// One key.\n    Unsharded,\n    \
               Random { k: u32 },\n    TimeBucket(u32),\n}\n\
               impl<'a, T: Into<u8>> Holder<'a, T> where T: Copy {\n    pub fn home(&self) {}\n}\n\
               impl std::fmt::Display for Strategy {\n    fn fmt(&self) { let s = \"}{\"; let c = '}'; }\n}\n\
               fn outer() -> &'static str { \"\" }\nconst fn seven() -> u8 { 7 }\n";
    let items = items(src);
    let names: Vec<(&str, &str, Option<&str>, bool)> = items
        .defs
        .iter()
        .map(|d| (d.name.as_str(), d.kind, d.owner.as_deref(), d.top))
        .collect();
    assert_eq!(
        names,
        [
            ("Strategy", "enum", None, true),
            ("home", "fn", Some("Holder"), false),
            ("fmt", "fn", Some("Strategy"), false),
            ("outer", "fn", None, true),
            ("seven", "fn", None, true),
        ]
    );
    let variants: Vec<&str> = items.variants.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(variants, ["Unsharded", "Random", "TimeBucket"]);
    assert_eq!(
        items.reexports,
        BTreeSet::from(["B".to_owned(), "E".to_owned(), "f".to_owned()])
    );
}
