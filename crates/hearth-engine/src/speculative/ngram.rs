//! Prompt lookup (n-gram drafting): the row's latest tokens are looked up in a text it already has — its own
//! prompt and output, or a request's prediction — and the tokens that followed the match there are the draft.
//! The longest match wins (from [`MAX_NGRAM`] down to [`MIN_NGRAM`] tokens), and among matches of one length the
//! latest (an edit re-emits the file in order, so the latest occurrence is where the output is).

/// The longest suffix looked up.
pub const MAX_NGRAM: usize = 8;
/// The shortest suffix that may draft (one or two tokens match too much prose to be worth verifying).
pub const MIN_NGRAM: usize = 3;

/// Up to `k` tokens that followed the latest, longest match of `context`'s last `n` tokens (n from `MAX_NGRAM`
/// down to `MIN_NGRAM`) in `source` (when `source` is `context` itself, the suffix does not match itself), and `n`.
/// None when nothing matches.
pub fn lookup(source: &[u32], context: &[u32], k: usize, self_source: bool) -> Option<(Vec<u32>, usize)> {
    if k == 0 {
        return None;
    }
    for n in (MIN_NGRAM..=MAX_NGRAM.min(context.len())).rev() {
        let suffix = &context[context.len() - n..];
        // Matches ending before the source's end (something follows them); in the row's own tokens, before the
        // suffix itself.
        let end = if self_source { source.len().saturating_sub(1) } else { source.len() };
        if end < n {
            continue;
        }
        let found = (0..=end - n).rev().find(|&i| &source[i..i + n] == suffix && i + n < source.len());
        if let Some(i) = found {
            let from = i + n;
            return Some((source[from..(from + k).min(source.len())].to_vec(), n));
        }
    }
    None
}

/// Up to `k` tokens of a prediction after where `context`'s latest tokens occur in it, the occurrence nearest at or
/// after `cursor` (where the output stood in the prediction before it departed from it) winning over a longer one
/// elsewhere: an edit re-emits the prediction in order, so the right place is the next one. Matches as short as
/// one token count within [`WINDOW`] tokens after the cursor; farther away, [`MIN_NGRAM`] tokens at least.
/// Returns the draft, the prediction index it starts at, and the match's length.
pub fn follow(prediction: &[u32], context: &[u32], cursor: usize, k: usize) -> Option<(Vec<u32>, usize, usize)> {
    if k == 0 {
        return None;
    }
    let cursor = cursor.min(prediction.len());
    for n in (1..=MAX_NGRAM.min(context.len())).rev() {
        let suffix = &context[context.len() - n..];
        let at = |i: usize| i + n < prediction.len() && &prediction[i..i + n] == suffix;
        // The nearest occurrence from the cursor on (its start may lie up to n tokens before the cursor).
        let from = cursor.saturating_sub(n);
        let near = (from..prediction.len().saturating_sub(n)).find(|&i| at(i));
        let found = match near {
            Some(i) if n >= MIN_NGRAM || i + n <= cursor + WINDOW => Some(i),
            _ if n >= MIN_NGRAM => (0..from.min(prediction.len().saturating_sub(n))).rev().find(|&i| at(i)),
            _ => None,
        };
        if let Some(i) = found {
            let start = i + n;
            return Some((prediction[start..(start + k).min(prediction.len())].to_vec(), start, n));
        }
    }
    None
}

/// How far after the cursor a one-token match may re-synchronise a prediction.
pub const WINDOW: usize = 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_latest_match_drafts_what_followed_it() {
        // "1 2 3 4 5 9" then "1 2 3" again: the 3-gram matches at 0.
        let ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 3, true), Some((vec![4, 5, 9], 3)));
        // A longer match beats a later shorter one.
        let ctx = [0, 7, 2, 3, 4, 1, 7, 2, 3, 6, 9, 0, 7, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 2, true), Some((vec![4, 1], 4)));
        // Of equal matches the latest.
        let ctx = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 1, true), Some((vec![5], 3)));
        // The suffix never matches itself; two tokens are not a match.
        assert_eq!(lookup(&[1, 2, 3], &[1, 2, 3], 4, true), None);
        assert_eq!(lookup(&[5, 1, 5, 1], &[5, 1, 5, 1], 4, true), None);
        // Another source: the draft may run to its end.
        assert_eq!(lookup(&[1, 2, 3, 4, 5], &[9, 1, 2, 3], 8, false), Some((vec![4, 5], 3)));
        assert_eq!(lookup(&[1, 2, 3], &[9, 1, 2, 3], 8, false), None, "nothing follows the match");
        assert_eq!(lookup(&[1, 2, 3, 4], &[1, 2, 3], 0, false), None);
    }

    #[test]
    fn a_prediction_is_followed_from_its_cursor() {
        // "x = 1 ; y = 2 ; x = 3": the output renamed x to z at the start and wrote "z =".
        let pred = [10, 11, 1, 12, 20, 11, 2, 12, 10, 11, 3];
        // One token (" =", 11) near the cursor (2) re-synchronises: the draft is what followed it there.
        assert_eq!(follow(&pred, &[99, 11], 2, 3), Some((vec![1, 12, 20], 2, 1)));
        // The nearest occurrence after the cursor wins over an earlier one.
        assert_eq!(follow(&pred, &[7, 12, 10, 11], 9, 2), Some((vec![3], 10, 3)));
        // Far from the cursor a single token does not count; two do.
        let long: Vec<u32> = (200..300).chain([11, 5, 6, 7]).collect();
        assert_eq!(follow(&long, &[98, 11], 0, 2), None);
        assert_eq!(follow(&long, &[98, 11, 5], 0, 2), None, "two tokens far from the cursor");
        assert_eq!(follow(&long, &[98, 11, 5, 6], 0, 2), Some((vec![7], 103, 3)));
        assert_eq!(follow(&pred, &[1], 0, 0), None);
    }
}
