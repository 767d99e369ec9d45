/*
 * The cluster's placement rule, shared by daemons and clients (both ends
 * must agree on it): an entry's owners are the top r live members by
 * rendezvous (highest-random-weight) hashing of its key. A member's score
 * for a key depends on the two alone, so when a member joins it takes about
 * 1/n of the keys — each from the owner it outscores — and no other key
 * moves; when one leaves only its keys move. (Issue 14; docs/deploy.md.)
 *
 * score(key, id) = the first 8 bytes, big-endian, of SHA-256 over the
 * string "hypic-owner", its NUL, the 32-byte key and the member's id bytes.
 * Ties (never seen in practice) go to the smaller id. The Python client
 * computes the same (client/python/hypic/cluster.py).
 */
#ifndef HY_CLUSTER_H
#define HY_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define HY_MEMBER_ID_MAX 64 /* a member's id, with its NUL */
#define HY_OWNERS_MAX    64 /* replicas an entry may have */

/* The score of member `id` for `key`. */
uint64_t hy_rendezvous_score(const uint8_t key[32], const char *id);

/* The owners of key among the n members ids[0..n): the indexes of the top
 * min(r, n, HY_OWNERS_MAX) by score, best first, into out. Returns how
 * many. */
size_t hy_rendezvous_owners(const uint8_t key[32], const char *const *ids, size_t n, size_t r,
                            size_t *out);

#endif
