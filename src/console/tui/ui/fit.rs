//! Which columns a table shows at a width, and how wide each is. On a narrow terminal the columns
//! that identify a row and those that answer the view's question stay; the others give way, the
//! least needed first, and the view's Selected panel shows what they held. No column is wider
//! than its widest cell on screen: a column of short words (the Trace's SOURCE, mostly `trace`)
//! leaves its room to the others.

use crate::console::columns::{self, Column, FILL_MIN};

/// A table's columns, the one that identifies its row, and how the others give way.
pub(super) struct TableSpec {
    pub cols: &'static [Column],
    /// The column kept whole (its widest cell on screen) at any width.
    pub keep: usize,
    /// Per column: 0 = always shown (it answers the view's question); the higher, the sooner it
    /// gives way. `None`: every column shown, cut left to right ([`columns::fit`]).
    pub rank: Option<&'static [u8]>,
}

/// The shown columns in table order, each with its width, in `total` cells (spacing 1);
/// `widest[i]`: the widest cell of column `i` on screen, its header included.
pub(super) fn fit(spec: &TableSpec, total: u16, widest: &[u16]) -> Vec<(usize, u16)> {
    let Some(rank) = spec.rank else {
        let keep_len = widest[spec.keep];
        let widths = columns::fit(spec.cols, total, spec.keep, keep_len);
        return widths.into_iter().enumerate().collect();
    };
    let mut shown: Vec<Option<u16>> = vec![None; spec.cols.len()];
    let mut used = 0u16;
    for i in by_need(spec.keep, rank) {
        let gap = u16::from(used > 0);
        let want = wanted(spec, i, widest);
        let width = if used + gap + want <= total {
            want
        } else if i == spec.keep || rank[i] == 0 {
            total.saturating_sub(used + gap)
        } else {
            continue;
        };
        if width > 0 {
            shown[i] = Some(width);
            used += gap + width;
        }
    }
    share_the_rest(spec.cols, &mut shown, total.saturating_sub(used));
    shown
        .into_iter()
        .enumerate()
        .filter_map(|(i, w)| w.map(|w| (i, w)))
        .collect()
}

/// The identifying column, then by rank, then left to right.
fn by_need(keep: usize, rank: &[u8]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rank.len()).collect();
    order.sort_by_key(|&i| (i != keep, rank[i], i));
    order
}

/// What column `i` asks for: the identifying one its widest cell, a fixed one its width but no
/// more than its widest cell (a narrow one, [`NARROW`] or less, its width: a duration or a PID
/// keeps its place however long it is now), one that takes the rest at least [`FILL_MIN`].
fn wanted(spec: &TableSpec, i: usize, widest: &[u16]) -> u16 {
    let c = &spec.cols[i];
    if i == spec.keep {
        widest[i]
    } else if c.width == 0 {
        FILL_MIN.min(widest[i].max(c.header.len() as u16))
    } else {
        c.width.min(widest[i].max(NARROW))
    }
}

/// A fixed column this wide or narrower keeps its width (in the Selected panel too).
pub(super) const NARROW: u16 = 8;

/// What is left goes to the shown columns that take the rest (`width == 0`).
fn share_the_rest(cols: &[Column], shown: &mut [Option<u16>], mut left: u16) {
    let fills: Vec<usize> = (0..cols.len())
        .filter(|i| shown[*i].is_some() && cols[*i].width == 0)
        .collect();
    for (k, i) in fills.iter().enumerate() {
        let share = left / (fills.len() - k) as u16;
        if let Some(w) = &mut shown[*i] {
            *w += share;
        }
        left -= share;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DLQ_RANK: &[u8] = &[4, 3, 6, 0, 5, 2, 0, 7, 1];

    fn headers(shown: &[(usize, u16)]) -> Vec<&'static str> {
        shown.iter().map(|(i, _)| columns::DLQ[*i].header).collect()
    }

    /// The DLQ at 100 columns keeps its order, what the consumer would do now, the redrive and
    /// the reason; the event ID, the source and who dead-lettered it give way first.
    #[test]
    fn the_columns_that_answer_stay_and_the_others_give_way() {
        let spec = TableSpec {
            cols: columns::DLQ,
            keep: columns::DLQ_ID,
            rank: Some(DLQ_RANK),
        };
        let widest = [7, 6, 28, 29, 36, 8, 28, 27, 60];
        let at_100 = fit(&spec, 98, &widest);
        assert_eq!(
            headers(&at_100),
            ["AT", "ORDER", "REDRIVEN", "NOW", "REASON"],
            "{at_100:?}"
        );
        let used: u16 = at_100.iter().map(|(_, w)| w + 1).sum::<u16>() - 1;
        assert_eq!(used, 98, "the reason takes the rest: {at_100:?}");
        assert_eq!(
            headers(&fit(&spec, 78, &widest)),
            ["ORDER", "NOW", "REASON"]
        );
        assert_eq!(fit(&spec, 198, &widest).len(), 9);
        // Narrower than the order itself: the order, cut; then what answers, as it fits.
        assert_eq!(fit(&spec, 20, &widest), [(3, 20)]);
    }

    /// A fixed column is no wider than its widest cell: short cells leave their room.
    #[test]
    fn a_column_of_short_cells_is_narrow() {
        let spec = TableSpec {
            cols: columns::TIMELINE,
            keep: columns::TIMELINE_ID,
            rank: Some(&[0, 3, 2, 0, 1]),
        };
        let shown = fit(&spec, 98, &[12, 5, 6, 80, 10]);
        assert_eq!(shown, [(0, 12), (1, 6), (2, 6), (3, 60), (4, 10)]);
    }
}
