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
 * and the tokens they emit, with drafting allowed and with it forbidden
 * (and, for a combination led by cheap drafters, with those alone: where
 * "suffix,eagle" pays less than suffix), per number of sequences decoding
 * in the pass (a pass of four has other rates than one of one).  Each
 * bucket runs cycles: most steps in the mode that measured fastest, a few
 * in each other one, so every estimate stays current as the text changes.  The first step after a switch is not
 * measured: it pays for the other mode (a head catching up on the rows it
 * skipped, caches refilled).  The cost of knowing is bounded: at most the
 * probe share of steps run in the slower mode.
 *
 * Probing has a price where drafting clearly wins: with suffix at 2x on a
 * copying task, plain probes in 6 steps of 48 give back 5-6 % of its
 * speed (by arithmetic: 6 steps of one token where 3 would come).  So a drafting leader that beat every other mode by a margin for
 * a whole cycle gets a cycle twice as long, up to four times (probes in 6
 * of 174 steps), and loses that the moment another mode measures faster
 * by the margin: the leader's own rate is current at every step, so a
 * leader that slows down (the text stopped copying) returns to the usual
 * cycle at once, and its probes come at most 42 steps later.  A plain leader does not back off: there the probes are
 * what notices that drafting has begun to pay.
 */
#include "speculative/speculative.h"

#include <assert.h>
#include <string.h>

#define SP_SPEC_GATE_DECAY 0.97       /* memory of ~30 measured steps per mode */
#define SP_SPEC_GATE_MIN 2.5          /* measured steps (decayed) of a mode before it may lead */
#define SP_SPEC_GATE_MARGIN 1.10      /* a drafting leader this much faster than every other mode ... */
#define SP_SPEC_GATE_BACKOFF_MAX 2    /* ... doubles its cycle's main part, up to 2^this times */

void sp_spec_gate_init(sp_spec_gate *g, bool cheap) {
    memset(g, 0, sizeof *g);
    g->cheap = cheap;
    for (int i = 0; i < SP_SPEC_GATE_BUCKETS; i++) {
        g->b[i].prefer = SP_GATE_ALL;   /* draft until measured otherwise */
        g->b[i].last = -1;
    }
}

static sp_spec_gate_bucket *bucket(sp_spec_gate *g, int n_seqs) {
    const int i = n_seqs < 1 ? 0 : n_seqs > SP_SPEC_GATE_BUCKETS ? SP_SPEC_GATE_BUCKETS - 1 : n_seqs - 1;
    return &g->b[i];
}

/* Early cycles are short, so a request learns within its first hundred
 * steps; later ones long, so probing the slower modes costs little. */
static int main_len(const sp_spec_gate_bucket *b) { return b->cycle < 2 ? 12 : 42 << b->backoff; }
static int probe_len(const sp_spec_gate_bucket *b) { return b->cycle < 2 ? 4 : 6; }
static int n_modes(const sp_spec_gate *g) { return g->cheap ? 3 : 2; }
/* The gate's i-th mode: PLAIN, (CHEAP,) ALL. */
static sp_gate_mode mode_at(const sp_spec_gate *g, int i) {
    return i == 0 ? SP_GATE_PLAIN : i == n_modes(g) - 1 ? SP_GATE_ALL : SP_GATE_CHEAP;
}

double sp_spec_gate_rate(const sp_spec_gate *g, int n_seqs, sp_gate_mode mode) {
    const sp_spec_gate_bucket *b = bucket((sp_spec_gate *)g, n_seqs);
    return b->n[mode] >= SP_SPEC_GATE_MIN && b->sec[mode] > 0 ? b->tok[mode] / b->sec[mode] : 0.0;
}

/* The fastest measured mode; ALL while it is not measured. */
static sp_gate_mode fastest(const sp_spec_gate *g, int n_seqs) {
    sp_gate_mode best = SP_GATE_ALL;
    double best_rate = sp_spec_gate_rate(g, n_seqs, SP_GATE_ALL);
    if (best_rate <= 0) return SP_GATE_ALL;
    for (int i = 0; i < n_modes(g) - 1; i++) {
        const sp_gate_mode m = mode_at(g, i);
        const double r = sp_spec_gate_rate(g, n_seqs, m);
        if (r > best_rate) { best = m; best_rate = r; }
    }
    return best;
}

/* Whether mode m, drafting, beats every other mode by the margin (all of
 * them measured). */
static bool clear_lead(const sp_spec_gate *g, int n_seqs, sp_gate_mode m) {
    const double r = sp_spec_gate_rate(g, n_seqs, m);
    if (m == SP_GATE_PLAIN || r <= 0) return false;
    for (int i = 0; i < n_modes(g); i++) {
        const sp_gate_mode o = mode_at(g, i);
        if (o == m) continue;
        const double ro = sp_spec_gate_rate(g, n_seqs, o);
        if (ro <= 0 || r < SP_SPEC_GATE_MARGIN * ro) return false;
    }
    return true;
}

/* Whether another mode measured faster than m by the margin (a margin, so
 * that two modes about as fast do not end each other's long cycles). */
static bool overtaken(const sp_spec_gate *g, int n_seqs, sp_gate_mode m) {
    const double r = sp_spec_gate_rate(g, n_seqs, m);
    for (int i = 0; i < n_modes(g); i++) {
        const sp_gate_mode o = mode_at(g, i);
        if (o != m && sp_spec_gate_rate(g, n_seqs, o) > SP_SPEC_GATE_MARGIN * r) return true;
    }
    return false;
}

sp_gate_mode sp_spec_gate_next(sp_spec_gate *g, int n_seqs) {
    sp_spec_gate_bucket *b = bucket(g, n_seqs);
    if (b->pos == 0) {
        const sp_gate_mode lead = fastest(g, n_seqs);
        const bool kept = b->cycle >= 2 && lead == b->prefer && clear_lead(g, n_seqs, lead);
        b->backoff = kept ? (b->backoff < SP_SPEC_GATE_BACKOFF_MAX ? b->backoff + 1 : b->backoff) : 0;
        b->prefer = lead;
    } else if (b->backoff > 0 && b->pos < main_len(b) && overtaken(g, n_seqs, b->prefer)) {
        /* the leader of a long cycle fell behind: back to the usual cycle,
         * whose probes (now, if it is past their start) measure the others
         * afresh before the next cycle picks.  Not a switch on the spot: the
         * others' rates are as old as their last probes, and a leader whose
         * rate swings (drafting in bursts) would hand over at a low point
         * to a mode that then runs unmeasured against it */
        b->backoff = 0;
    }
    sp_gate_mode mode = b->prefer;
    if (b->pos >= main_len(b)) {     /* the probes: each other mode in turn */
        int k = (b->pos - main_len(b)) / probe_len(b);
        for (int i = 0; i < n_modes(g); i++) {
            if (mode_at(g, i) == b->prefer) continue;
            if (k-- == 0) { mode = mode_at(g, i); break; }
        }
    }
    b->fresh = b->last != (int)mode;
    b->last = (int)mode;
    if (++b->pos >= main_len(b) + (n_modes(g) - 1) * probe_len(b)) {
        b->pos = 0;
        b->cycle++;
    }
    return mode;
}

void sp_spec_gate_observe(sp_spec_gate *g, int n_seqs, sp_gate_mode mode, double tokens, double seconds) {
    sp_spec_gate_bucket *b = bucket(g, n_seqs);
    assert(b->last == (int)mode);    /* the mode sp_spec_gate_next gave this step */
    if (b->fresh || seconds <= 0 || tokens < 0) return;
    b->tok[mode] = b->tok[mode] * SP_SPEC_GATE_DECAY + tokens;
    b->sec[mode] = b->sec[mode] * SP_SPEC_GATE_DECAY + seconds;
    b->n[mode] = b->n[mode] * SP_SPEC_GATE_DECAY + 1.0;
}
