//! llama.cpp's GBNF grammars, rewritten into llguidance's Lark dialect (which already takes `{m,n}`, `#` comments
//! and `-` in names): `name ::= body` becomes a one-line `name: body` rule, `root` becomes `start`, character
//! classes and `.` become regex terminals, and string literals are re-escaped. Token references (`<[123]>`,
//! `<think>`) pass through. Errors name the line.

/// One lexical piece of a GBNF grammar.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Define,
    /// A literal's decoded text.
    Str(String),
    /// A character class, brackets included, as a regex.
    Class(String),
    Any,
    /// `(`, `)`, `|`, `*`, `+`, `?`, or a `{m,n}` repetition: copied as is.
    Op(String),
    /// `<...>`: a token reference.
    Token(String),
}

/// Convert a GBNF grammar to Lark.
pub fn to_lark(src: &str) -> Result<String, String> {
    let toks = lex(src)?;
    // Rules: a name followed by `::=` starts one.
    let mut rules: Vec<(String, Vec<Tok>)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match (&toks[i].1, toks.get(i + 1).map(|t| &t.1)) {
            (Tok::Name(n), Some(Tok::Define)) => {
                rules.push((n.clone(), Vec::new()));
                i += 2;
            }
            (t, _) => match rules.last_mut() {
                Some((_, body)) => {
                    body.push(t.clone());
                    i += 1;
                }
                None => return Err(format!("line {}: expected `name ::= ...`", toks[i].0)),
            },
        }
    }
    if rules.is_empty() {
        return Err("the grammar has no rules".into());
    }
    let defined: std::collections::HashSet<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    if !defined.contains("root") {
        return Err("the grammar has no `root` rule".into());
    }
    for (name, body) in &rules {
        if body.is_empty() {
            return Err(format!("rule `{name}` is empty"));
        }
        for t in body {
            if let Tok::Name(n) = t {
                if !defined.contains(n.as_str()) {
                    return Err(format!("rule `{name}` refers to `{n}`, which is not defined"));
                }
            }
        }
    }
    let mut out = String::new();
    for (name, body) in &rules {
        out.push_str(&rule_name(name));
        out.push(':');
        for t in body {
            // Repetition operators stick to what they repeat.
            let postfix = matches!(t, Tok::Op(o) if o != "(" && o != ")" && o != "|");
            if !postfix {
                out.push(' ');
            }
            match t {
                Tok::Name(n) => out.push_str(&rule_name(n)),
                Tok::Str(s) => out.push_str(&super::lark::lark_string(s)),
                Tok::Class(c) => {
                    out.push('/');
                    out.push_str(&c.replace('/', "\\/"));
                    out.push('/');
                }
                Tok::Any => out.push_str("/(?s:.)/"),
                Tok::Op(o) => out.push_str(o),
                Tok::Token(t) => out.push_str(t),
                Tok::Define => return Err(format!("rule `{name}`: a stray `::=`")),
            }
        }
        out.push('\n');
    }
    Ok(out)
}

/// GBNF names may hold capitals (a Lark terminal) and `root` is Lark's `start`: every rule becomes a lowercase
/// Lark rule with a prefix that keeps names apart.
fn rule_name(n: &str) -> String {
    if n == "root" {
        return "start".into();
    }
    let mut s = String::from("g_");
    for c in n.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// The grammar's tokens, each with its line.
fn lex(src: &str) -> Result<Vec<(usize, Tok)>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        let (tok, next) = match c {
            '\n' => {
                line += 1;
                (None, i + 1)
            }
            c if c.is_whitespace() => (None, i + 1),
            '#' => (None, comment_end(&chars, i)),
            ':' if chars.get(i + 1) == Some(&':') && chars.get(i + 2) == Some(&'=') => (Some(Tok::Define), i + 3),
            '"' => {
                let (s, next) = literal(&chars, i + 1, line)?;
                (Some(Tok::Str(s)), next)
            }
            '[' => char_class(&chars, i, line).map(|(t, next)| (Some(t), next))?,
            '<' => token_ref(&chars, i, line).map(|(t, next)| (Some(t), next))?,
            '{' => repetition(&chars, i, line).map(|(t, next)| (Some(t), next))?,
            '(' | ')' | '|' | '*' | '+' | '?' => (Some(Tok::Op(c.to_string())), i + 1),
            '.' => (Some(Tok::Any), i + 1),
            c if name_char(c) => {
                let end = (i..chars.len()).find(|&j| !name_char(chars[j])).unwrap_or(chars.len());
                (Some(Tok::Name(chars[i..end].iter().collect())), end)
            }
            other => return Err(format!("line {line}: unexpected `{other}`")),
        };
        if let Some(tok) = tok {
            out.push((line, tok));
        }
        i = next;
    }
    Ok(out)
}

/// A character of a rule name.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Where a `#` comment starting at `i` ends (its line's newline, or the end).
fn comment_end(chars: &[char], i: usize) -> usize {
    (i..chars.len()).find(|&j| chars[j] == '\n').unwrap_or(chars.len())
}

/// A character class `[...]` starting at `i`, and the index after it.
fn char_class(chars: &[char], start: usize, line: usize) -> Result<(Tok, usize), String> {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != ']' {
        if chars[i] == '\\' {
            i += 1;
        }
        if chars.get(i) == Some(&'\n') {
            return Err(format!("line {line}: a character class runs past the end of the line"));
        }
        i += 1;
    }
    if i >= chars.len() {
        return Err(format!("line {line}: unterminated character class"));
    }
    Ok((Tok::Class(chars[start..i + 1].iter().collect()), i + 1))
}

/// A token reference `<...>` starting at `i`, and the index after it.
fn token_ref(chars: &[char], start: usize, line: usize) -> Result<(Tok, usize), String> {
    let mut i = start;
    while i < chars.len() && chars[i] != '>' && chars[i] != '\n' {
        i += 1;
    }
    if chars.get(i) != Some(&'>') {
        return Err(format!("line {line}: unterminated token reference `<...>`"));
    }
    Ok((Tok::Token(chars[start..i + 1].iter().collect()), i + 1))
}

/// A repetition `{m}`, `{m,}` or `{m,n}` starting at `i` (spaces dropped), and the index after it.
fn repetition(chars: &[char], start: usize, line: usize) -> Result<(Tok, usize), String> {
    let mut i = start;
    while i < chars.len() && chars[i] != '}' {
        if !(chars[i].is_ascii_digit() || chars[i] == ',' || chars[i] == ' ' || chars[i] == '{') {
            return Err(format!("line {line}: a repetition must be {{m}}, {{m,}} or {{m,n}}"));
        }
        i += 1;
    }
    if i >= chars.len() {
        return Err(format!("line {line}: unterminated repetition `{{`"));
    }
    let rep: String = chars[start..i + 1].iter().filter(|c| **c != ' ').collect();
    Ok((Tok::Op(rep), i + 1))
}

/// A string literal's text from just after its opening quote; returns it and the index after the closing quote.
fn literal(chars: &[char], mut i: usize, line: usize) -> Result<(String, usize), String> {
    let mut s = String::new();
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\n' => break,
            '\\' => {
                let e = chars.get(i + 1).copied().ok_or(format!("line {line}: a string ends in `\\`"))?;
                i += 2;
                let hex = |n: usize, i: &mut usize| -> Result<char, String> {
                    let digits: String = chars.get(*i..*i + n).map(|d| d.iter().collect()).unwrap_or_default();
                    *i += n;
                    u32::from_str_radix(&digits, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or(format!("line {line}: bad escape `\\{e}{digits}`"))
                };
                s.push(match e {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    '\\' | '"' | '[' | ']' => e,
                    'x' => hex(2, &mut i)?,
                    'u' => hex(4, &mut i)?,
                    'U' => hex(8, &mut i)?,
                    other => return Err(format!("line {line}: unknown escape `\\{other}`")),
                });
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(format!("line {line}: unterminated string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions() {
        let g = r#"
# a list of answers
root   ::= "Answer: " Item ("," ws Item){0,3} "\n"
Item   ::= [a-z/]+ | "\"q\"" | num
num    ::= [0-9]{1,3} .
ws     ::= [ \t]*   # spaces
"#;
        let lark = to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: \"Answer: \" g__item ( \",\" g_ws g__item ){0,3} \"\\n\"\n\
             g__item: /[a-z\\/]/+ | \"\\\"q\\\"\" | g_num\n\
             g_num: /[0-9]/{1,3} /(?s:.)/\n\
             g_ws: /[ \\t]/*\n"
        );
    }

    #[test]
    fn errors_name_the_problem() {
        for (g, want) in [
            ("root ::= \"a", "unterminated string"),
            ("root ::= [a-z", "unterminated character class"),
            ("item ::= \"a\"", "no `root` rule"),
            ("root ::= other", "`other`, which is not defined"),
            ("root ::= \"a\" {x}", "repetition"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("\"a\"", "expected `name ::= ...`"),
            ("root ::=", "is empty"),
            ("", "no rules"),
            ("root ::= @", "unexpected `@`"),
        ] {
            let err = to_lark(g).unwrap_err();
            assert!(err.contains(want), "{g:?}: {err}");
        }
    }
}
