//! Mutations of valid bodies, byte damage, and the cases: which route, method, path, body and server.

use super::rng::Rng;
use super::server::SERVERS;
use super::values::*;
use axum::http::Method;
use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub enum Seg {
    Key(String),
    Idx(usize),
}

pub fn paths(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    out.push(here.clone());
    if out.len() > 4000 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Seg::Key(k.clone()));
                paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate().take(50) {
                here.push(Seg::Idx(i));
                paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

pub fn at<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Seg::Idx(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

pub fn mutate(rng: &mut Rng, v: &mut Value, vocab: usize) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let mut path = rng.pick(&all).clone();
    if path.is_empty() && all.len() > 1 && rng.pct(80) {
        path = rng.pick(&all[1..]).clone();
    }
    // Deleting needs the parent.
    if rng.pct(15) && !path.is_empty() {
        let (last, parent) = path.split_last().expect("non-empty");
        if let Some(p) = at(v, parent) {
            match (last, p) {
                (Seg::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (Seg::Idx(i), Value::Array(a)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        return;
    }
    let Some(target) = at(v, &path) else { return };
    match rng.below(13) {
        0..=3 => *target = nasty(rng),
        4 => *target = Value::Null,
        5 => {
            // Add a known field with a nasty value to an object.
            if let Value::Object(m) = target {
                let k = rng.pick(KNOWN_KEYS).to_string();
                m.insert(k, nasty(rng));
            } else {
                *target = nasty(rng);
            }
        }
        6 => {
            // Numbers: a neighbour or an extreme; strings: a number-like string; else a type swap.
            *target = match target {
                Value::Number(n) => {
                    let x = n.as_f64().unwrap_or(0.0);
                    match rng.below(6) {
                        0 => json!(-x),
                        1 => json!(x * 1e10),
                        2 => json!(x + 0.5),
                        3 => json!(x.to_string()),
                        4 => json!((x as i64).saturating_add(1)),
                        _ => number(rng),
                    }
                }
                Value::String(s) if !s.is_empty() && rng.pct(50) => json!(s.len()),
                _ => scalar(rng),
            }
        }
        7 => {
            // Oversize or empty an array.
            if let Value::Array(a) = target {
                if a.is_empty() || rng.pct(30) {
                    a.clear();
                } else {
                    let x = a[rng.below(a.len())].clone();
                    let n = *rng.pick(&[17usize, 65, 300, 3000]);
                    a.extend(std::iter::repeat_n(x, n));
                }
            } else {
                *target = json!([target.clone()]);
            }
        }
        8 => {
            let inner = target.clone();
            *target = nest(rng, inner);
        }
        9 => {
            let inner = target.clone();
            *target = if rng.pct(50) { json!([inner]) } else { json!({"value": inner}) };
        }
        10 => *target = token_id(rng, vocab),
        11 => *target = json!(random_string(rng)),
        _ => *target = random_value(rng, 4),
    }
}

pub fn damage_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..rng.range(1, 3) {
        let len = b.len();
        match rng.below(9) {
            0 if len > 0 => b.truncate(rng.below(len)),
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                let junk: &[u8] = rng.pick::<&[u8]>(&[
                    b"NaN".as_slice(),
                    b"Infinity",
                    b"-",
                    b"1e999",
                    b"\"\\ud800\"",
                    b"\\",
                    b"\x00",
                    b"\xff\xfe",
                    b"\xc3",
                    b",",
                    b"}",
                    b"]]]",
                    b"{\"a\":",
                    b"01",
                    b"\"\\u",
                ]);
                b.splice(i..i, junk.iter().copied());
            }
            3 if len > 1 => {
                let i = rng.below(len);
                let j = (i + rng.below(16)).min(len);
                b.drain(i..j);
            }
            4 if len > 0 => {
                // Duplicate a slice (duplicate keys, repeated elements).
                let i = rng.below(len);
                let j = (i + rng.below(64)).min(len);
                let s = b[i..j].to_vec();
                b.splice(j..j, s);
            }
            5 => {
                let i = rng.below(len + 1);
                b.splice(i..i, std::iter::repeat_n(b' ', rng.below(8)));
            }
            6 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            _ => {}
        }
    }
}

pub fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
        1 => {
            // JSON-ish token soup.
            let toks: &[&[u8]] = &[
                b"{",
                b"}",
                b"[",
                b"]",
                b":",
                b",",
                b"\"",
                b"1",
                b"-",
                b"e",
                b"null",
                b"true",
                b" ",
                b"\"messages\"",
                b"\\",
            ];
            (0..rng.below(40)).flat_map(|_| rng.pick(toks).to_vec()).collect()
        }
        2 => {
            let depth = *rng.pick(&[127usize, 128, 129, 1000, 100_000]);
            let open = if rng.pct(50) { b"[".as_slice() } else { b"{\"a\":".as_slice() };
            open.repeat(depth)
        }
        3 => b"".to_vec(),
        4 => rng
            .pick(&[&b"null"[..], b"[]", b"\"x\"", b"1e999", b"{}", b"{\"a\":1}{}", b"\xef\xbb\xbf{}", b"  {}  "])
            .to_vec(),
        _ => random_string(rng).into_bytes(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    Chat,
    Completions,
    Messages,
    Responses,
    Tokenize,
    Detokenize,
    ApplyTemplate,
    Other,
}

pub struct Case {
    pub route: Route,
    pub method: Method,
    pub path: String,
    pub body: Vec<u8>,
    /// Index into `SERVERS`.
    pub model: usize,
}

pub fn make_case(rng: &mut Rng, vocabs: &[usize]) -> Case {
    let mut roll = rng.below(100) as u64;
    let mut model = 0;
    while model + 1 < vocabs.len() && roll >= SERVERS[model].2 {
        roll -= SERVERS[model].2;
        model += 1;
    }
    let vocab = vocabs[model];
    let route = match rng.below(100) {
        0..=29 => Route::Chat,
        30..=49 => Route::Completions,
        50..=58 => Route::Messages,
        59..=66 => Route::Responses,
        67..=72 => Route::Tokenize,
        73..=80 => Route::Detokenize,
        81..=93 => Route::ApplyTemplate,
        _ => Route::Other,
    };
    let (method, path) = match route {
        Route::Chat => (Method::POST, "/v1/chat/completions".to_string()),
        Route::Completions => (Method::POST, "/v1/completions".to_string()),
        Route::Messages => {
            (Method::POST, if rng.pct(90) { "/v1/messages" } else { "/v1/messages/count_tokens" }.to_string())
        }
        Route::Responses => (Method::POST, "/v1/responses".to_string()),
        Route::Tokenize => (Method::POST, "/tokenize".to_string()),
        Route::Detokenize => (Method::POST, "/detokenize".to_string()),
        Route::ApplyTemplate => (Method::POST, "/apply-template".to_string()),
        Route::Other => {
            let id = ["smollm2-135m", "gemma3-270m", "", "a/b/c", "%FF%FE", "%00", "..%2F..", "x%", "%E2%82", "🦀"];
            let path = match rng.below(10) {
                9 => "/v1/embeddings".into(),
                7 => format!("/v1/responses/{}", rng.pick(&id)),
                8 => "/metrics".into(),
                0 => format!("/v1/models/{}", rng.pick(&id)),
                1 => "/v1/models".into(),
                2 => "/health".into(),
                3 => "/stats".into(),
                4 => format!("/v1/{}", rng.pick(&id)),
                5 => "/v1/chat/completions?stream=true&x=%ZZ".into(),
                _ => "/".into(),
            };
            let method = rng
                .pick(&[Method::GET, Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS])
                .clone();
            (method, path)
        }
    };
    let valid = |rng: &mut Rng| match route {
        Route::Chat => chat_body(rng, vocab),
        Route::Completions | Route::Other => completion_body(rng, vocab),
        Route::Messages => anthropic_body(rng),
        Route::Responses => responses_body(rng),
        Route::Tokenize => tokenize_body(rng),
        Route::Detokenize => detokenize_body(rng, vocab),
        Route::ApplyTemplate => template_body(rng),
    };
    let body = match rng.below(100) {
        // Structure-aware mutations of a valid body (0 mutations: the valid body itself).
        0..=69 => {
            let mut v = valid(rng);
            let k = *rng.pick(&[0usize, 0, 1, 1, 1, 2, 2, 3, 4]);
            for _ in 0..k {
                mutate(rng, &mut v, vocab);
            }
            serde_json::to_vec(&v).expect("serializing")
        }
        // Arbitrary JSON: mostly objects of known keys.
        70..=84 => {
            let v = if rng.pct(80) {
                let n = rng.range(0, 6);
                Value::Object((0..n).map(|_| (random_key(rng), random_value(rng, 3))).collect())
            } else {
                random_value(rng, 4)
            };
            serde_json::to_vec(&v).expect("serializing")
        }
        // Byte damage to a valid body.
        85..=92 => {
            let mut b = serde_json::to_vec(&valid(rng)).expect("serializing");
            damage_bytes(rng, &mut b);
            b
        }
        _ => random_bytes(rng),
    };
    Case { route, method, path, body, model }
}
