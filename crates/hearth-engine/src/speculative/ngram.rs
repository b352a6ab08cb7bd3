//! Prompt lookup (n-gram drafting): the row's latest tokens are looked up in a text it already has — its own
//! prompt and output, or a request's prediction — and the tokens that followed the match there are the draft.
//! The longest match wins (from [`MAX_NGRAM`] down to [`MIN_NGRAM`] tokens), and among matches of one length the
//! latest (an edit re-emits the file in order, so the latest occurrence is where the output is).

/// The longest suffix looked up.
pub const MAX_NGRAM: usize = 8;
/// The shortest suffix that may draft (one token matches too much to be worth verifying).
pub const MIN_NGRAM: usize = 2;

/// Up to `k` tokens that followed the latest, longest match of `context`'s last `n` tokens (n from `MAX_NGRAM`
/// down to `MIN_NGRAM`) in `source` (when `source` is `context` itself, the suffix does not match itself).
/// Empty when nothing matches.
pub fn lookup(source: &[u32], context: &[u32], k: usize, self_source: bool) -> Vec<u32> {
    if k == 0 {
        return Vec::new();
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
            return source[from..(from + k).min(source.len())].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_latest_match_drafts_what_followed_it() {
        // "a b c d" then later "x b c" -> the 2-gram "b c" matches at 1; "x b c" (3) matches nowhere.
        let ctx = [1, 2, 3, 4, 5, 9, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 3, true), vec![4, 5, 9]);
        // A longer match beats a later shorter one.
        let ctx = [7, 2, 3, 4, 1, 2, 3, 6, 0, 7, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 2, true), vec![4, 1]);
        // Of equal matches the latest.
        let ctx = [2, 3, 4, 2, 3, 5, 2, 3];
        assert_eq!(lookup(&ctx, &ctx, 1, true), vec![5]);
        // The suffix never matches itself; one token is not a match.
        assert!(lookup(&[1, 2, 3], &[1, 2, 3], 4, true).is_empty());
        assert!(lookup(&[5, 1, 5], &[5, 1, 5], 4, true).is_empty());
        // Another source: the draft may run to its end.
        assert_eq!(lookup(&[1, 2, 3, 4], &[9, 1, 2], 8, false), vec![3, 4]);
        assert!(lookup(&[1, 2], &[9, 1, 2], 8, false).is_empty(), "nothing follows the match");
        assert!(lookup(&[1, 2, 3], &[1, 2], 0, false).is_empty());
    }
}
