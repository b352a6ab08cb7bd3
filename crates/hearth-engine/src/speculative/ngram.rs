//! Prompt lookup (n-gram drafting): the row's latest tokens are looked up in a text it already has — its own
//! prompt and output, or a request's prediction — and the tokens that followed the match there are the draft.
//! The longest match wins (from [`MAX_NGRAM`] down to [`MIN_NGRAM`] tokens), and among matches of one length the
//! latest (an edit re-emits the file in order, so the latest occurrence is where the output is).

/// The longest suffix looked up.
pub const MAX_NGRAM: usize = 8;
/// The shortest suffix that may draft (one or two tokens match too much prose to be worth verifying).
pub const MIN_NGRAM: usize = 3;

/// Up to `k` tokens that followed the latest, longest match of the last `n` of `tokens` (the row's prompt and
/// output; n from `MAX_NGRAM` down to `MIN_NGRAM`) earlier in them, and `n`. None when nothing matches. One pass:
/// each earlier position is extended backwards as far as it agrees with the suffix.
pub fn lookup(tokens: &[u32], k: usize) -> Option<(Vec<u32>, usize)> {
    let len = tokens.len();
    if k == 0 || len <= MIN_NGRAM {
        return None;
    }
    // A match ends before the last token (something follows it; the suffix never matches itself).
    let longest = MAX_NGRAM.min(len - 1);
    let mut best: Option<(usize, usize)> = None;
    for end in (MIN_NGRAM..len).rev() {
        let mut n = 0;
        while n < longest.min(end) && tokens[end - 1 - n] == tokens[len - 1 - n] {
            n += 1;
        }
        if n >= MIN_NGRAM && best.is_none_or(|(_, m)| n > m) {
            best = Some((end, n));
            if n == longest {
                break;
            }
        }
    }
    best.map(|(end, n)| (tokens[end..(end + k).min(len)].to_vec(), n))
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
        assert_eq!(lookup(&ctx, 3), Some((vec![4, 5, 9], 3)));
        // A longer match beats a later shorter one.
        let ctx = [0, 7, 2, 3, 4, 1, 7, 2, 3, 6, 9, 0, 7, 2, 3];
        assert_eq!(lookup(&ctx, 2), Some((vec![4, 1], 4)));
        // Of equal matches the latest.
        let ctx = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3];
        assert_eq!(lookup(&ctx, 1), Some((vec![5], 3)));
        // The suffix never matches itself; two tokens are not a match.
        assert_eq!(lookup(&[1, 2, 3], 4), None);
        assert_eq!(lookup(&[5, 1, 5, 1], 4), None);
        // The draft may run to the end of the tokens; a match may overlap the suffix.
        assert_eq!(lookup(&[1, 2, 3, 4, 9, 1, 2, 3], 8), Some((vec![4, 9, 1, 2, 3], 3)));
        assert_eq!(lookup(&[5, 5, 5, 5], 8), Some((vec![5], 3)));
        assert_eq!(lookup(&[1, 2, 3, 4, 1, 2, 3], 0), None);
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
