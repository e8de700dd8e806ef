/* Speculation statistics. */
#include "speculative/speculative.h"

#include <stdio.h>
#include <string.h>

void sp_stats_method(sp_spec_stats *st, const char *name, int drafted, int accepted) {
    int i = 0;
    while (i < st->n_methods && strcmp(st->by_method[i].name, name)) i++;
    if (i == st->n_methods) {
        if (i == SP_STAT_METHODS) return;
        snprintf(st->by_method[i].name, sizeof st->by_method[i].name, "%s", name);
        st->n_methods++;
    }
    st->by_method[i].rounds++;
    st->by_method[i].drafted += drafted;
    st->by_method[i].accepted += accepted;
}

void sp_stats_add(sp_spec_stats *a, const sp_spec_stats *s) {
    for (int i = 0; i < s->n_methods; i++) {
        const sp_method_stats *m = &s->by_method[i];
        int j = 0;
        while (j < a->n_methods && strcmp(a->by_method[j].name, m->name)) j++;
        if (j == a->n_methods) {
            if (j == SP_STAT_METHODS) continue;
            a->by_method[j] = (sp_method_stats){ .rounds = 0 };
            memcpy(a->by_method[j].name, m->name, sizeof m->name);
            a->n_methods++;
        }
        a->by_method[j].rounds += m->rounds;
        a->by_method[j].drafted += m->drafted;
        a->by_method[j].accepted += m->accepted;
    }
    a->requests += s->requests;
    a->rounds += s->rounds;
    a->spec_rounds += s->spec_rounds;
    a->drafted += s->drafted;
    a->accepted += s->accepted;
    for (int i = 0; i < SP_STAT_POSITIONS; i++) {
        a->pos_drafted[i] += s->pos_drafted[i];
        a->pos_accepted[i] += s->pos_accepted[i];
    }
    a->forwards += s->forwards;
    a->group_proposals += s->group_proposals;
    a->gated_rounds += s->gated_rounds;
    a->cheap_rounds += s->cheap_rounds;
    a->emitted += s->emitted;
    a->n_prompt += s->n_prompt;
    a->n_cached += s->n_cached;
    a->prefill_ns += s->prefill_ns;
    a->draft_ns += s->draft_ns;
    a->verify_ns += s->verify_ns;
    a->sample_ns += s->sample_ns;
    a->total_ns += s->total_ns;
    a->forced_drafted += s->forced_drafted;
    a->forced_accepted += s->forced_accepted;
    a->masks += s->masks;
    a->mask_misses += s->mask_misses;
    a->mask_ns += s->mask_ns;
}

double sp_stats_accept_rate(const sp_spec_stats *s) {
    return s->drafted ? (double)s->accepted / (double)s->drafted : 0.0;
}

double sp_stats_mean_accept_len(const sp_spec_stats *s) {
    return s->spec_rounds ? 1.0 + (double)s->accepted / (double)s->spec_rounds : 1.0;
}

double sp_stats_tokens_per_forward(const sp_spec_stats *s) {
    /* The first token of each request comes from its prefill pass. */
    return s->forwards ? (double)(s->emitted - s->requests) / (double)s->forwards : 0.0;
}

double sp_stats_decode_tps(const sp_spec_stats *s) {
    return s->total_ns ? (double)s->emitted / sp_ns_to_s(s->total_ns) : 0.0;
}

void sp_stats_format(const sp_spec_stats *s, const char *method, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap,
        "spec %s: %lld rounds (%lld drafting, %lld gated plain, %lld cheap only), drafted %lld, accepted %lld (%.1f%%), mean accept "
        "len %.2f, %.2f tokens/forward, time draft %.0f ms verify %.0f ms sample %.0f ms | "
        "accept by position:", method, (long long)s->rounds, (long long)s->spec_rounds, (long long)s->gated_rounds,
        (long long)s->cheap_rounds,
        (long long)s->drafted, (long long)s->accepted, 100.0 * sp_stats_accept_rate(s),
        sp_stats_mean_accept_len(s), sp_stats_tokens_per_forward(s), s->draft_ns / 1e6,
        s->verify_ns / 1e6, s->sample_ns / 1e6);
    for (int i = 0; i < SP_STAT_POSITIONS && s->pos_drafted[i] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, " %.2f",
                              (double)s->pos_accepted[i] / (double)s->pos_drafted[i]);
    if (s->n_methods > 1)
        for (int i = 0; i < s->n_methods && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s %s: %lld rounds, %lld/%lld accepted",
                                  i ? ";" : " | by drafter:", s->by_method[i].name,
                                  (long long)s->by_method[i].rounds, (long long)s->by_method[i].accepted,
                                  (long long)s->by_method[i].drafted);
    if ((s->masks || s->forced_drafted) && n < cap)
        snprintf(buf + n, cap - n, " | grammar: forced %lld/%lld accepted, masks %lld (%lld computed), %.1f ms",
                 (long long)s->forced_accepted, (long long)s->forced_drafted, (long long)s->masks,
                 (long long)s->mask_misses, s->mask_ns / 1e6);
}
