//! docs/http-api.md documents every operation of docs/openapi.json (which a unit test keeps equal
//! to the served document): a section per operation with each of its parameters and status
//! codes, a field table per schema with exactly the schema's fields, and every error status in
//! the Problems table. An operation, parameter, status or field added to the API without its
//! line in the page fails here, and so does a section left behind by a removed operation.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn document() -> Value {
    serde_json::from_str(&repo_file("docs/openapi.json")).expect("docs/openapi.json is JSON")
}

/// Every operation of the document: (`GET`, `/v1/limits/{policy}/{key}`, the operation).
fn operations(document: &Value) -> Vec<(String, String, Value)> {
    let mut operations = vec![];
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            if [
                "get", "put", "post", "delete", "patch", "head", "options", "trace",
            ]
            .contains(&method.as_str())
            {
                operations.push((method.to_uppercase(), path.clone(), operation.clone()));
            }
        }
    }
    operations
}

/// The lines of the section under `heading` (a whole line), up to the next heading of the same
/// or a higher level.
fn section<'d>(page: &'d str, heading: &str) -> Vec<&'d str> {
    let level = heading.split(' ').next().unwrap_or("#").len();
    let mut lines = page.lines();
    assert!(
        lines.by_ref().any(|line| line == heading),
        "docs/http-api.md has no section `{heading}`"
    );
    lines
        .take_while(|line| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            hashes == 0 || hashes > level
        })
        .collect()
}

/// The first cells (`| `x` |`) of every table row in `lines`.
fn first_cells(lines: &[&str]) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |"))
        .map(|(cell, _)| cell.to_owned())
        .collect()
}

#[test]
fn every_operation_has_a_section_with_its_parameters_and_statuses() {
    let document = document();
    let page = repo_file("docs/http-api.md");
    let operations = operations(&document);
    assert!(operations.len() >= 11, "{} operations", operations.len());
    for (method, path, operation) in &operations {
        let heading = format!("### `{method} {path}`");
        let lines = section(&page, &heading);
        let rows = first_cells(&lines);
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let name = parameter["name"].as_str().expect("parameter name");
            assert!(rows.contains(name), "{heading}: no row for parameter `{name}`");
        }
        for status in operation["responses"].as_object().expect("responses").keys() {
            assert!(rows.contains(status), "{heading}: no row for status `{status}`");
        }
        // Each schema the operation takes or answers with is named (and linked) in its section.
        let text = lines.join("\n");
        let mut schemas = vec![];
        collect_refs(operation, &mut schemas);
        for schema in schemas {
            assert!(
                text.contains(&format!("[`{schema}`](#{})", schema.to_lowercase())),
                "{heading}: schema `{schema}` is not linked"
            );
        }
    }
}

#[test]
fn the_page_has_no_section_for_an_operation_the_document_lacks() {
    let document = document();
    let page = repo_file("docs/http-api.md");
    let known: BTreeSet<String> = operations(&document)
        .into_iter()
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    let methods = ["GET ", "POST ", "PUT ", "DELETE ", "PATCH "];
    for line in page.lines() {
        let Some(name) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) else {
            continue;
        };
        if methods.iter().any(|m| name.starts_with(m)) {
            assert!(
                known.contains(name),
                "docs/http-api.md documents `{name}`, which the API does not have"
            );
        }
    }
}

#[test]
fn every_schema_has_a_table_of_exactly_its_fields() {
    let document = document();
    let page = repo_file("docs/http-api.md");
    let schemas = document["components"]["schemas"].as_object().expect("schemas");
    for (name, schema) in schemas {
        let lines = section(&page, &format!("### `{name}`"));
        let documented = first_cells(&lines);
        let fields: BTreeSet<String> = schema["properties"]
            .as_object()
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default();
        if fields.is_empty() {
            // A choice between schemas (oneOf): each alternative is linked.
            let mut alternatives = vec![];
            collect_refs(schema, &mut alternatives);
            assert!(
                !alternatives.is_empty(),
                "`{name}` has neither fields nor alternatives"
            );
            let text = lines.join("\n");
            for alternative in alternatives {
                assert!(
                    text.contains(&format!("[`{alternative}`](#{})", alternative.to_lowercase())),
                    "`{name}`: alternative `{alternative}` is not linked"
                );
            }
            continue;
        }
        assert_eq!(
            documented, fields,
            "the field table of `{name}` in docs/http-api.md"
        );
        for required in schema["required"].as_array().into_iter().flatten() {
            let field = required.as_str().expect("required field");
            let row = lines
                .iter()
                .find(|line| line.starts_with(&format!("| `{field}` |")))
                .expect("row");
            assert!(row.contains("| yes |"), "`{name}.{field}` is required: {row}");
        }
    }
}

#[test]
fn every_error_status_is_in_the_problems_table() {
    let document = document();
    let page = repo_file("docs/http-api.md");
    let problems = first_cells(&section(&page, "## Problems"));
    for (method, path, operation) in operations(&document) {
        for status in operation["responses"].as_object().expect("responses").keys() {
            if status.as_str() >= "400" {
                assert!(
                    problems.contains(status),
                    "{method} {path}: status {status} is not in ## Problems"
                );
            }
        }
    }
}

/// The names of the component schemas `value` refers to (`#/components/schemas/Name`).
fn collect_refs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref")
                && let Some(name) = target.strip_prefix("#/components/schemas/")
                && !into.iter().any(|n| n == name)
            {
                into.push(name.to_owned());
            }
            for inner in map.values() {
                collect_refs(inner, into);
            }
        }
        Value::Array(items) => items.iter().for_each(|inner| collect_refs(inner, into)),
        _ => {}
    }
}
