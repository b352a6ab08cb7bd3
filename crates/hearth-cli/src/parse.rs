//! Values of command-line flags that clap does not parse itself.

/// `on` / `off`.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("`{s}` must be `on` or `off`")),
    }
}

/// `4096`, `512K`, `4M`, `1G` (powers of 1024; a trailing `B`/`iB` is allowed).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_uppercase();
    let t = t.trim_end_matches("IB").trim_end_matches('B');
    let (num, mult) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size (examples: 4096, 512K, 4M)"))?;
    if !(n.is_finite() && n >= 1.0) {
        return Err(format!("`{s}` must be at least 1 byte"));
    }
    Ok((n * mult as f64) as usize)
}
