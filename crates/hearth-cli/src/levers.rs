//! `hearth levers`: every runtime lever with its effective value (from the environment), default and meaning.

use clap::Args;
use hearth_engine::levers;

#[derive(Args)]
pub struct LeversArgs {
    /// Print one JSON object {name: value} of the effective values instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: LeversArgs) -> anyhow::Result<()> {
    let effective = levers::get().effective();
    if a.json {
        let map: serde_json::Map<String, serde_json::Value> =
            effective.into_iter().map(|(n, v)| (n.to_string(), serde_json::Value::String(v))).collect();
        println!("{}", serde_json::Value::Object(map));
        return Ok(());
    }
    let value_of = |name: &str| effective.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone()).unwrap_or_default();
    println!("{:<28} {:<10} {:<10} {:<11} doc", "lever", "value", "default", "kind");
    for d in levers::table() {
        let scope = if d.cuda_only { " (CUDA builds)" } else { "" };
        println!(
            "{:<28} {:<10} {:<10} {:<11} {}{scope}",
            d.name,
            value_of(d.name),
            d.default,
            d.kind.to_string(),
            d.doc
        );
    }
    Ok(())
}
