//! docs/cli.md's environment-lever table against the lever registry (`hearth_engine::levers::table`): the same
//! levers in the same order, each row's kind, builds and default columns as the registry declares them.

use hearth_engine::levers::{table, LeverDoc};

/// The cells of a Markdown table row (`\|` inside a cell is not a separator), trimmed.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            out.push(String::new());
        } else if let Some(cell) = out.last_mut() {
            cell.push(c);
        }
        prev = c;
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The rows of the `## Environment` section's table, header first.
fn environment_table() -> Vec<Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let start = text.find("\n## Environment").unwrap_or_else(|| panic!("{path} has no `## Environment` section"));
    let section = &text[start + 1..];
    let section = section[1..].find("\n## ").map_or(section, |end| &section[..end + 1]);
    section.lines().filter(|l| l.trim_start().starts_with('|') && !l.contains("|---")).map(cells).collect()
}

#[test]
fn cli_doc_lists_every_lever_with_its_default() {
    let rows = environment_table();
    let header = rows.first().expect("docs/cli.md: the environment section has a table");
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("the lever table has no `{name}` column: {header:?}"))
    };
    let (var, kind, builds, default) = (col("variable"), col("kind"), col("builds"), col("default"));
    let documented: Vec<&Vec<String>> =
        rows[1..].iter().filter(|r| r.get(var).is_some_and(|v| v.starts_with("`HEARTH_"))).collect();
    let name_of = |r: &Vec<String>| r[var].trim_matches('`').to_string();
    let doc_names: Vec<String> = documented.iter().map(|r| name_of(r)).collect();
    let reg_names: Vec<String> = table().iter().map(|d| d.name.to_string()).collect();
    let missing: Vec<&String> = reg_names.iter().filter(|n| !doc_names.contains(n)).collect();
    let extra: Vec<&String> = doc_names.iter().filter(|n| !reg_names.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/cli.md's lever table: missing {missing:?}, not levers {extra:?}"
    );
    assert_eq!(doc_names, reg_names, "docs/cli.md lists the levers in another order than the registry");
    for (row, d) in documented.iter().zip(table()) {
        let LeverDoc { name, kind: k, default: def, cuda_only, .. } = *d;
        let want_builds = if cuda_only { "cuda" } else { "all" };
        let got = (row[kind].as_str(), row[builds].as_str(), row[default].as_str());
        assert_eq!(
            got,
            (k.to_string().as_str(), want_builds, def),
            "{name}: (kind, builds, default) in docs/cli.md vs the registry"
        );
    }
}
