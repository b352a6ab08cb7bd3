//! Grouping inputs into padded batches: longest first, so the rows of one batch have similar lengths and little
//! padding, each batch within a row count and a padded-token budget.

/// Limits of one forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Rows per forward pass.
    pub max_rows: usize,
    /// Rows × padded length per forward pass (bounds the activations and the (L × L) attention scores). A single
    /// input longer than this still runs, alone.
    pub max_tokens: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self { max_rows: 32, max_tokens: 8192 }
    }
}

/// The batches for inputs of these lengths: indices into `lens`, each batch's first index its longest row.
pub fn plan(lens: &[usize], limits: BatchLimits) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let (max_rows, max_tokens) = (limits.max_rows.max(1), limits.max_tokens.max(1));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match batches.last_mut() {
            // Rows come longest first, so the batch's padded length is its first row's.
            Some(b) if b.len() < max_rows && (b.len() + 1) * lens[b[0]] <= max_tokens => b.push(i),
            _ => batches.push(vec![i]),
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_first_within_limits() {
        let lens = [3, 10, 4, 10, 1, 7];
        let b = plan(&lens, BatchLimits { max_rows: 3, max_tokens: 25 });
        // 10, 10 (20 tokens; a third 10-row would be 30), then 7, 4, 3 (21), then 1.
        assert_eq!(b, vec![vec![1, 3], vec![5, 2, 0], vec![4]]);
        let all: usize = b.iter().map(Vec::len).sum();
        assert_eq!(all, lens.len());
    }

    #[test]
    fn an_input_over_the_token_budget_runs_alone() {
        assert_eq!(plan(&[50, 2], BatchLimits { max_rows: 8, max_tokens: 16 }), vec![vec![0], vec![1]]);
        assert!(plan(&[], BatchLimits::default()).is_empty());
    }
}
