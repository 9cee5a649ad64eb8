//! Reading a `RateLimitRequest` in the proto3 JSON mapping, as protobuf's JSON parser does (see
//! the [module docs](super)); every error names the field.

use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use serde_json::{Map, Value};

use super::super::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use super::super::proto::{RateLimitDescriptor, RateLimitRequest};

/// Reads a `RateLimitRequest` in the proto3 JSON mapping; the error names the field.
///
/// ```
/// let request = tollgate_server::grpc::json::parse_request(
///     br#"{"domain": "edge", "hitsAddend": "2", "descriptors": [{"entries": [{"key": "k"}]}]}"#,
/// )?;
/// assert_eq!(request.hits_addend, 2);
/// assert_eq!(request.descriptors[0].entries[0].value, "");
///
/// let err = tollgate_server::grpc::json::parse_request(br#"{"domain": 7}"#).unwrap_err();
/// assert_eq!(err, "domain: expected a string, got 7");
/// # Ok::<(), String>(())
/// ```
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|err| format!("invalid json: {err}"))?;
    let mut fields = Fields::new(&value, "")?;
    let domain = fields
        .take(&["domain"])
        .map(|v| string(v, "domain"))
        .transpose()?;
    let hits_addend = fields
        .take(&["hits_addend", "hitsAddend"])
        .map(|v| uint32(v, "hits_addend"))
        .transpose()?;
    let descriptors = match fields.take(&["descriptors"]) {
        Some(list) => array(list, "descriptors")?
            .iter()
            .enumerate()
            .map(|(i, d)| descriptor(d, &format!("descriptors[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    fields.finish()?;
    Ok(RateLimitRequest {
        domain: domain.unwrap_or_default(),
        descriptors,
        hits_addend: hits_addend.unwrap_or_default(),
    })
}

fn descriptor(value: &Value, at: &str) -> Result<RateLimitDescriptor, String> {
    let mut fields = Fields::new(value, at)?;
    let entries = match fields.take(&["entries"]) {
        Some(list) => array(list, &join(at, "entries"))?
            .iter()
            .enumerate()
            .map(|(i, e)| entry(e, &format!("{at}.entries[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let limit = fields
        .take(&["limit"])
        .map(|v| limit(v, &join(at, "limit")))
        .transpose()?;
    let hits_addend = fields
        .take(&["hits_addend", "hitsAddend"])
        .map(|v| uint64(v, &join(at, "hits_addend")))
        .transpose()?
        .map(|value| envoy_types::pb::google::protobuf::UInt64Value { value });
    let is_negative_hits = fields
        .take(&["is_negative_hits", "isNegativeHits"])
        .map(|v| boolean(v, &join(at, "is_negative_hits")))
        .transpose()?
        .unwrap_or_default();
    fields.finish()?;
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

fn entry(value: &Value, at: &str) -> Result<Entry, String> {
    let mut fields = Fields::new(value, at)?;
    let key = fields
        .take(&["key"])
        .map(|v| string(v, &join(at, "key")))
        .transpose()?;
    let value = fields
        .take(&["value"])
        .map(|v| string(v, &join(at, "value")))
        .transpose()?;
    fields.finish()?;
    Ok(Entry {
        key: key.unwrap_or_default(),
        value: value.unwrap_or_default(),
    })
}

fn limit(value: &Value, at: &str) -> Result<RateLimitOverride, String> {
    let mut fields = Fields::new(value, at)?;
    let requests_per_unit = fields
        .take(&["requests_per_unit", "requestsPerUnit"])
        .map(|v| uint32(v, &join(at, "requests_per_unit")))
        .transpose()?;
    let unit = fields
        .take(&["unit"])
        .map(|v| unit(v, &join(at, "unit")))
        .transpose()?;
    fields.finish()?;
    Ok(RateLimitOverride {
        requests_per_unit: requests_per_unit.unwrap_or_default(),
        unit: unit.unwrap_or_default(),
    })
}

/// The members of one JSON object, taken one field at a time; what is left is unknown.
struct Fields<'a> {
    members: Option<&'a Map<String, Value>>,
    taken: Vec<&'a str>,
    at: String,
}

impl<'a> Fields<'a> {
    /// The object at `at`; `null` is an empty message.
    fn new(value: &'a Value, at: &str) -> Result<Self, String> {
        let members = match value {
            Value::Object(members) => Some(members),
            Value::Null => None,
            other => return Err(format!("{}expected an object, got {}", prefix(at), shown(other))),
        };
        Ok(Fields {
            members,
            taken: Vec::new(),
            at: at.to_owned(),
        })
    }

    /// The field under any of its `names` (proto name, JSON name); `null` is absent.
    fn take(&mut self, names: &[&'a str]) -> Option<&'a Value> {
        let members = self.members?;
        let mut found = None;
        for &name in names {
            if let Some(value) = members.get(name) {
                self.taken.push(name);
                if found.is_some() {
                    // Reported by `finish`, which sees both spellings taken.
                    self.taken.push("");
                }
                found = Some(value);
            }
        }
        found.filter(|value| !value.is_null())
    }

    /// Fails on a field taken twice (two spellings) or never taken (unknown).
    fn finish(self) -> Result<(), String> {
        let Some(members) = self.members else {
            return Ok(());
        };
        if self.taken.contains(&"") {
            return Err(format!(
                "{}a field is given under both of its names",
                prefix(&self.at)
            ));
        }
        if let Some(unknown) = members.keys().find(|k| !self.taken.contains(&k.as_str())) {
            return Err(format!("{}unknown field `{unknown}`", prefix(&self.at)));
        }
        Ok(())
    }
}

fn prefix(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("{at}: ")
    }
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

/// A value as an error message shows it, cut short.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

fn string(value: &Value, at: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{at}: expected a string, got {}", shown(value)))
}

fn boolean(value: &Value, at: &str) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| format!("{at}: expected true or false, got {}", shown(value)))
}

fn array<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{at}: expected a list, got {}", shown(value)))
}

/// A non-negative integer, as a number (`3`, `3.0`, `3e0`) or a decimal string (`"3"`).
fn uint64(value: &Value, at: &str) -> Result<u64, String> {
    let parsed = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
                // The range is checked above: the conversion is exact.
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok().filter(|_| s.trim() == s),
        _ => None,
    };
    parsed.ok_or_else(|| format!("{at}: expected a non-negative integer, got {}", shown(value)))
}

fn uint32(value: &Value, at: &str) -> Result<u32, String> {
    let n = uint64(value, at)?;
    u32::try_from(n).map_err(|_| format!("{at}: {n} is more than a 32-bit field holds"))
}

/// An `envoy.type.v3.RateLimitUnit` by name or number.
fn unit(value: &Value, at: &str) -> Result<i32, String> {
    if let Some(name) = value.as_str() {
        return RateLimitUnit::from_str_name(name)
            .map(|unit| unit as i32)
            .ok_or_else(|| format!("{at}: unknown unit `{name}`"));
    }
    let n = uint32(value, at)?;
    i32::try_from(n).map_err(|_| format!("{at}: unknown unit {n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_of_a_field_are_read() {
        for body in [
            r#"{"domain":"d","hits_addend":3,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":0,"is_negative_hits":false}]}"#,
            r#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0","isNegativeHits":false}]}"#,
        ] {
            let request = parse_request(body.as_bytes()).expect(body);
            assert_eq!(request.hits_addend, 3, "{body}");
            let descriptor = &request.descriptors[0];
            assert_eq!(descriptor.hits_addend.map(|h| h.value), Some(0), "{body}");
            assert_eq!(
                (
                    descriptor.entries[0].key.as_str(),
                    descriptor.entries[0].value.as_str()
                ),
                ("k", "v")
            );
        }
    }

    #[test]
    fn a_limit_override_is_read_by_unit_name_or_number() {
        let by_name = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[],"limit":{"requestsPerUnit":5,"unit":"HOUR"}}]}"#,
        )
        .unwrap();
        let by_number = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[],"limit":{"requests_per_unit":"5","unit":3}}]}"#,
        )
        .unwrap();
        assert_eq!(by_name, by_number);
        assert_eq!(
            by_name.descriptors[0].limit,
            Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: RateLimitUnit::Hour as i32
            })
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases: [(&str, &str); 9] = [
            ("{", "invalid json: "),
            ("[]", "expected an object, got []"),
            (r#"{"domain":"d","extra":1}"#, "unknown field `extra`"),
            (
                r#"{"hits_addend":1,"hitsAddend":1}"#,
                "a field is given under both of its names",
            ),
            (
                r#"{"hits_addend":-1}"#,
                "hits_addend: expected a non-negative integer, got -1",
            ),
            (
                r#"{"hits_addend":4294967296}"#,
                "hits_addend: 4294967296 is more than a 32-bit field holds",
            ),
            (r#"{"descriptors":{}}"#, "descriptors: expected a list, got {}"),
            (
                r#"{"descriptors":[{"entries":[{"key":7}]}]}"#,
                "descriptors[0].entries[0].key: expected a string, got 7",
            ),
            (
                r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
                "descriptors[0].limit.unit: unknown unit `FORTNIGHT`",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_request(body.as_bytes()).expect_err(body);
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn null_means_the_default() {
        let request = parse_request(
            br#"{"domain":"d","hitsAddend":null,"descriptors":[{"entries":null,"limit":null}]}"#,
        )
        .unwrap();
        assert_eq!(request.hits_addend, 0);
        assert!(request.descriptors[0].entries.is_empty() && request.descriptors[0].limit.is_none());
    }
}
