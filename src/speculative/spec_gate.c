/* The speculation gate: whether drafting pays, measured end to end.
 *
 * The adaptive controller (adaptive.c) predicts a round's rate from a
 * model: t(K) measured once, the drafter's own time, acceptance per
 * position.  What the model leaves out still costs: a head's weights
 * evicting the target's from the caches, sampling and bookkeeping of
 * drafted rows, a catch-up that delays every row of a shared pass.  Where
 * those tip the balance the controller drafts and the step runs slower
 * than plain decoding (eagle 0.90x alone, ngram 0.91x under load).
 *
 * The gate measures instead of modelling: the wall time of whole steps
 * and the tokens they emit, with drafting allowed and with it forbidden,
 * per number of sequences decoding in the pass (a pass of four has other
 * rates than one of one).  Each bucket runs cycles: most steps in the mode
 * that measured faster, the last few in the other one, so both estimates
 * stay current as the text changes.  The first step after a switch is not
 * measured: it pays for the other mode (a head catching up on the rows it
 * skipped, caches refilled).  The cost of knowing is bounded: at most the
 * probe share of steps run in the slower mode.
 */
#include "speculative/speculative.h"

#include <assert.h>
#include <string.h>

#define SP_SPEC_GATE_DECAY 0.97       /* memory of ~30 measured steps per mode */
#define SP_SPEC_GATE_MIN 2.5          /* measured steps (decayed) of each mode before the faster one leads */

void sp_spec_gate_init(sp_spec_gate *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < SP_SPEC_GATE_BUCKETS; i++) {
        g->b[i].prefer = true;   /* speculate until measured otherwise */
        g->b[i].last = -1;
    }
}

static sp_spec_gate_bucket *bucket(sp_spec_gate *g, int n_seqs) {
    int i = n_seqs < 1 ? 0 : n_seqs > SP_SPEC_GATE_BUCKETS ? SP_SPEC_GATE_BUCKETS - 1 : n_seqs - 1;
    return &g->b[i];
}

/* Early cycles are short, so a request learns within its first hundred
 * steps; later ones long, so probing the slower mode costs little. */
static int cycle_len(const sp_spec_gate_bucket *b) { return b->cycle < 2 ? 16 : 48; }
static int probe_len(const sp_spec_gate_bucket *b) { return b->cycle < 2 ? 4 : 6; }

double sp_spec_gate_rate(const sp_spec_gate *g, int n_seqs, bool spec) {
    const sp_spec_gate_bucket *b = bucket((sp_spec_gate *)g, n_seqs);
    const int m = spec;
    return b->n[m] >= SP_SPEC_GATE_MIN && b->sec[m] > 0 ? b->tok[m] / b->sec[m] : 0.0;
}

bool sp_spec_gate_next(sp_spec_gate *g, int n_seqs) {
    sp_spec_gate_bucket *b = bucket(g, n_seqs);
    if (b->pos == 0) {
        const double on = sp_spec_gate_rate(g, n_seqs, true), off = sp_spec_gate_rate(g, n_seqs, false);
        b->prefer = !(on > 0 && off > 0) || on >= off;
    }
    const bool spec = b->pos < cycle_len(b) - probe_len(b) ? b->prefer : !b->prefer;
    b->fresh = b->last != (int)spec;
    b->last = spec;
    if (++b->pos == cycle_len(b)) {
        b->pos = 0;
        b->cycle++;
    }
    return spec;
}

void sp_spec_gate_observe(sp_spec_gate *g, int n_seqs, bool spec, double tokens, double seconds) {
    sp_spec_gate_bucket *b = bucket(g, n_seqs);
    assert(b->last == (int)spec);    /* the mode sp_spec_gate_next gave this step */
    if (b->fresh || seconds <= 0 || tokens < 0) return;
    const int m = spec;
    b->tok[m] = b->tok[m] * SP_SPEC_GATE_DECAY + tokens;
    b->sec[m] = b->sec[m] * SP_SPEC_GATE_DECAY + seconds;
    b->n[m] = b->n[m] * SP_SPEC_GATE_DECAY + 1.0;
}
