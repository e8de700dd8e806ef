/*
 * cache/internal.h — the prefix cache's tree, shared by prefix.c (the
 * operations) and file.c (saving and loading it).  Internal to src/cache/.
 */
#ifndef SP_CACHE_INTERNAL_H
#define SP_CACHE_INTERNAL_H

#include "cache/cache.h"

typedef struct pc_ckpt {
    char *ns;
    uint8_t *blob;
    size_t len;
} pc_ckpt;

typedef struct pc_node {
    struct pc_node *parent;          /* NULL for the root */
    struct pc_node **kids;
    int n_kids, cap_kids;
    int32_t *toks;                   /* (len) the edge */
    int len;
    int depth;                       /* position of toks[0] */
    uint8_t *kv[2];                  /* K and V rows of the edge's positions: layer il's len rows
                                        at len * pre[s][il] bytes, row[s][il] bytes each */
    pc_ckpt *ckpts;                  /* drafter states after the edge's last token */
    int n_ckpts;
    uint64_t used;                   /* last use (the cache's tick) */
    int pin;                         /* > 0 while a call walks through it */
    int idx;                         /* in sp_pcache.all */
} pc_node;

struct sp_pcache {
    int n_layer, kv_dim;
    uint32_t *type[2];               /* (n_layer) K and V storage types (SP_F16, SP_Q8_0, SP_Q4_0) */
    size_t *row[2];                  /* (n_layer) bytes of one position's row */
    size_t *pre[2];                  /* (n_layer + 1) sums of row[] over the layers before */
    char *identity;
    pc_node root;
    pc_node **all;                   /* every node but the root, for eviction scans */
    int n_all, cap_all;
    pc_node **path;                  /* scratch: the nodes of the last walk */
    int n_path, cap_path;
    uint64_t tick;
    sp_pcache_stats st;
};

/* A node for positions after parent's, its rows uninitialised (not yet
 * counted in the cache's bytes: the caller adds sp_pc_node_bytes once it
 * is filled). */
pc_node *sp_pc_node_new(sp_pcache *pc, pc_node *parent, const int32_t *toks, int len);
size_t sp_pc_node_bytes(const sp_pcache *pc, const pc_node *x);
/* The child of x whose edge starts with t, or NULL. */
pc_node *sp_pc_kid_with(const pc_node *x, int32_t t);

#endif /* SP_CACHE_INTERNAL_H */
