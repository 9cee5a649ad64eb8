//! `tollgate bench`, `completions` and `man`, run as the real binary: the boundary table on stdout,
//! the chart on disk, the comparison's files, the shell scripts and manual pages,
//! and clear errors for bad arguments.

use std::process::{Command, Output};

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run the tollgate binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Width and height from a PNG's signature and IHDR chunk.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let signature = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Some((word(16), word(20)))
}

#[test]
fn bench_boundary_prints_the_accuracy_table_and_draws_the_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("boundary.png");
    let out = tollgate(&[
        "bench",
        "boundary",
        "--limit",
        "50",
        "--chart",
        chart.to_str().unwrap(),
        "--chart-width",
        "900",
        "--chart-height",
        "500",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        stdout
            .contains("| algorithm | admitted at 0:59.9 | admitted at 1:00.0 | max in any 60 s | vs limit |")
    );
    assert!(
        stdout.contains("| fixed window | 50 | 50 | 100 | 2.00× — over by 50 |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| sliding log | 50 | 0 | 50 | 1.00× — at the limit |"),
        "{stdout}"
    );
    let rows = stdout
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| algorithm"))
        .count();
    assert_eq!(rows, 6, "{stdout}");
    let png = std::fs::read(&chart).expect("chart written");
    assert_eq!(png_size(&png), Some((900, 500)));
}

#[test]
fn bench_without_a_chart_prints_only_markdown() {
    let out = tollgate(&["bench", "bot"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("## Bot:"), "{stdout}");
    assert!(stdout.contains("| fixed window |"));
}

#[test]
fn bench_rejects_bad_arguments_without_panicking() {
    let cases: [(&[&str], &str); 4] = [
        (&["bench", "nope"], "unrecognized subcommand 'nope'"),
        (
            &["bench", "boundary", "--limit", "0"],
            "--limit must be 1 to 100000, got 0",
        ),
        (
            &["bench", "throughput", "--redis", "redis://203.0.113.5:6379"],
            "is not a loopback address",
        ),
        (
            &["bench", "bot", "--chart", "/nonexistent-dir/for/chart.png"],
            "chart directory `/nonexistent-dir/for` does not exist",
        ),
    ];
    for (args, expected) in cases {
        let out = tollgate(args);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed {}", text(&out.stdout));
    }
}

#[test]
fn bench_compare_runs_end_to_end_on_memory_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = tollgate(&[
        "bench",
        "compare",
        "--limit",
        "10",
        "--window",
        "500ms",
        "--duration",
        "50ms",
        "--max-requests",
        "2000",
        "--keys",
        "100",
        "--seeds",
        "3",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        stdout.starts_with("## Compare: every algorithm on the memory store, 10 per 500 ms"),
        "{stdout}"
    );
    let table: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| algorithm"))
        .collect();
    assert_eq!(table.len(), 6, "{stdout}");
    // Fixed window: 2.00 at the boundary; sliding log: 1.00 under every shape.
    assert!(
        table[0].starts_with("| fixed window |") && table[0].contains("| 2.00 |"),
        "{stdout}"
    );
    assert!(table[1].contains("| 1.00 | 1.00 | 1.00 |"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("compare.md")).unwrap(),
        stdout
    );
    let png = std::fs::read(dir.path().join("compare.png")).expect("chart written");
    assert_eq!(png_size(&png), Some((1500, 1000)));
}

#[test]
fn bench_compare_refuses_a_store_off_this_machine() {
    // no store deadline: the address is refused before any call
    let out = tollgate(&["bench", "compare", "--store", "redis://192.0.2.7:6379"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("is not a loopback address"), "{stderr}");
}

#[test]
fn completions_name_every_subcommand_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = tollgate(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for subcommand in ["serve", "proxy", "check-config", "bench", "completions", "man"] {
            assert!(
                script.contains(subcommand),
                "{shell} completions lack {subcommand}"
            );
        }
    }
    let out = tollgate(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("possible values"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_man_pages_are_roff_with_every_subcommand_and_its_flags() {
    let out = tollgate(&["man"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains(".TH tollgate 1"), "{page}");
    // roff writes a hyphen as `\-`.
    for subcommand in ["serve", "proxy", "check\\-config", "bench", "completions", "man"] {
        assert!(
            page.contains(&format!("tollgate\\-{subcommand}(1)")),
            "man page lacks {subcommand}"
        );
    }

    let out = tollgate(&["man", "serve"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains(".TH tollgate-serve 1"), "{page}");
    assert!(
        page.contains("\\-\\-store\\-timeout"),
        "serve page lacks --store-timeout"
    );

    let out = tollgate(&["man", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("check-config"),
        "{}",
        text(&out.stderr)
    );
}
