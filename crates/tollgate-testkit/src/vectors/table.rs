//! Reading the vector tables: lines of whitespace-separated words, `#` comments, a `vector` line
//! naming each vector and `policy` lines giving its policies in tollgate's config format. A
//! table that cannot be read panics with its file and line: the tables are the testkit's own,
//! and a test must not run on a vector it misread.

use tollgate::Policy;
use tollgate::concurrency::ConcurrencyPolicy;
use tollgate_config::Limits;

use super::T0_US;

/// One vector as written: its name, its policies (name and spec) and its step lines.
pub(super) struct Block {
    pub(super) file: &'static str,
    pub(super) name: &'static str,
    policies: Vec<(Row, &'static str, &'static str)>,
    pub(super) rows: Vec<Row>,
}

/// One step line: its words, and where it is for error messages.
#[derive(Debug, Clone)]
pub(super) struct Row {
    file: &'static str,
    line: usize,
    words: Vec<&'static str>,
}

/// Every vector of the table `text`, read from the file named `file`.
pub(super) fn blocks(file: &'static str, text: &'static str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let row = Row {
            file,
            line: i + 1,
            words: words(file, i + 1, raw),
        };
        let Some(&first) = row.words.first() else { continue };
        if first == "vector" {
            let name = raw.trim_start().strip_prefix("vector").unwrap_or_default().trim();
            blocks.push(Block {
                file,
                name,
                policies: Vec::new(),
                rows: Vec::new(),
            });
            continue;
        }
        let Some(block) = blocks.last_mut() else {
            row.fail("a step before the first `vector` line")
        };
        if first == "policy" {
            let (name, spec) = match row.words.as_slice() {
                [_, name, spec] => (*name, *spec),
                _ => row.fail("expected `policy NAME {spec}`"),
            };
            block.policies.push((row.clone(), name, spec));
        } else {
            block.rows.push(row);
        }
    }
    blocks
}

/// The words of one line: up to a `#` outside quotes and braces, split at whitespace; a
/// `"quoted"` word and a `{...}` map (nested braces and brackets included) are one word each.
fn words(file: &str, line: usize, text: &'static str) -> Vec<&'static str> {
    let bytes = text.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' => i += 1,
            b'#' => break,
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                assert!(i < bytes.len(), "{file}:{line}: a quoted word is not closed");
                i += 1;
                words.push(&text[start..i]);
            }
            b'{' => {
                let start = i;
                let mut depth = 0;
                while i < bytes.len() {
                    match bytes[i] {
                        b'{' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    i += 1;
                    if depth == 0 {
                        break;
                    }
                }
                assert!(depth == 0, "{file}:{line}: a `{{` is not closed");
                words.push(&text[start..i]);
            }
            _ => {
                let start = i;
                while i < bytes.len() && !matches!(bytes[i], b' ' | b'\t' | b'#') {
                    i += 1;
                }
                words.push(&text[start..i]);
            }
        }
    }
    words
}

impl Block {
    /// The vector's policies, in the order written: tollgate-format policies, each with the
    /// generation a policy made in code has (0), so the vectors are the same from run to run.
    pub(super) fn policies(&self) -> Vec<Policy> {
        let limits = self.config();
        self.policies
            .iter()
            .map(|(row, name, _)| match limits.policy(name) {
                Some(named) => named.policy().clone().with_generation(0),
                None => row.fail(&format!("`{name}` is not a rate policy")),
            })
            .collect()
    }

    /// The vector's one policy.
    pub(super) fn policy(&self) -> Policy {
        match self.policies().as_slice() {
            [policy] => policy.clone(),
            _ => self.fail("expected one `policy` line"),
        }
    }

    /// The vector's one policy, a concurrency policy.
    pub(super) fn concurrency_policy(&self) -> ConcurrencyPolicy {
        let limits = self.config();
        match self.policies.as_slice() {
            [(row, name, _)] => limits
                .concurrency_policy(name)
                .cloned()
                .unwrap_or_else(|| row.fail(&format!("`{name}` is not a concurrency policy"))),
            _ => self.fail("expected one `policy` line"),
        }
    }

    /// The index of the policy named `name` among [`policies`](Self::policies).
    pub(super) fn policy_index(&self, row: &Row, name: &str) -> usize {
        self.policies
            .iter()
            .position(|(_, known, _)| *known == name)
            .unwrap_or_else(|| row.fail(&format!("no policy `{name}` in this vector")))
    }

    fn config(&self) -> Limits {
        let mut yaml = String::from("policies:\n");
        for (_, name, spec) in &self.policies {
            yaml.push_str(&format!("  {name}: {spec}\n"));
        }
        tollgate_config::parse(self.file, &yaml).unwrap_or_else(|e| self.fail(&format!("its policies: {e}")))
    }

    fn fail(&self, message: &str) -> ! {
        panic!("{}: vector `{}`: {message}", self.file, self.name)
    }
}

impl Row {
    /// The line's words.
    pub(super) fn words(&self) -> &[&'static str] {
        &self.words
    }

    /// Word `i`.
    pub(super) fn word(&self, i: usize) -> &'static str {
        self.words
            .get(i)
            .copied()
            .unwrap_or_else(|| self.fail(&format!("expected at least {} words", i + 1)))
    }

    /// Checks that the line has `n` words.
    pub(super) fn expect_len(&self, n: usize) {
        if self.words.len() != n {
            self.fail(&format!("expected {n} words, got {}", self.words.len()));
        }
    }

    /// Word `i` as a time: milliseconds after [`T0_US`] (`5_000`), or a UTC time
    /// (`2024-03-30T22:30:00Z`) at or after it.
    pub(super) fn at_ms(&self, i: usize) -> u64 {
        let word = self.word(i);
        if word.contains('T') {
            let at: jiff::Timestamp = word
                .parse()
                .unwrap_or_else(|e| self.fail(&format!("`{word}`: {e}")));
            let us = u64::try_from(at.as_microsecond())
                .ok()
                .and_then(|us| us.checked_sub(T0_US))
                .unwrap_or_else(|| self.fail(&format!("`{word}` is before T0_US")));
            us / 1000
        } else {
            self.number(i)
        }
    }

    /// Word `i` as a whole number (`1_000`).
    pub(super) fn number(&self, i: usize) -> u64 {
        let word = self.word(i);
        word.replace('_', "")
            .parse()
            .unwrap_or_else(|_| self.fail(&format!("expected a number, got `{word}`")))
    }

    /// Word `i` as milliseconds: a number, or a number and a unit (`15m`, `17h`); `-` for none.
    pub(super) fn ms(&self, i: usize) -> Option<u64> {
        let word = self.word(i);
        if word == "-" {
            return None;
        }
        let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let scale = match &word[digits.len()..] {
            "" | "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => self.fail(&format!(
                "expected milliseconds or a duration like 15m, got `{word}`"
            )),
        };
        let number: u64 = digits
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| self.fail(&format!("expected milliseconds, got `{word}`")));
        Some(number * scale)
    }

    /// Word `i` as `yes` or `no`.
    pub(super) fn yes(&self, i: usize) -> bool {
        match self.word(i) {
            "yes" => true,
            "no" => false,
            word => self.fail(&format!("expected yes or no, got `{word}`")),
        }
    }

    /// Word `i` as a key: the word itself, or a `"quoted"` one with `\n`, `\"`, `\\` and `\xNN`
    /// escapes (keys are bytes, not always text).
    pub(super) fn key(&self, i: usize) -> Vec<u8> {
        key(self.word(i)).unwrap_or_else(|message| self.fail(&message))
    }

    /// Fails the test, naming the file and line.
    pub(super) fn fail(&self, message: &str) -> ! {
        panic!("{}:{}: {message}: {}", self.file, self.line, self.words.join(" "))
    }
}

/// A key as written: see [`Row::key`].
pub(super) fn key(word: &str) -> Result<Vec<u8>, String> {
    let Some(quoted) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) else {
        return Ok(word.as_bytes().to_vec());
    };
    let mut out = Vec::with_capacity(quoted.len());
    let mut bytes = quoted.bytes();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b'"') => out.push(b'"'),
            Some(b'\\') => out.push(b'\\'),
            Some(b'x') => {
                let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                let byte = std::str::from_utf8(&hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("a bad \\x escape in {word}"))?;
                out.push(byte);
            }
            _ => return Err(format!("an unknown escape in {word}")),
        }
    }
    Ok(out)
}
