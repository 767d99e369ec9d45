/*
 * The serialised entry's layout as fuzz_entry and its seed generator need it
 * (docs/entry-format.md is the reference; model/entry_format.c writes it).
 * Written out here because the format's constants are private to the model:
 * a change of the format shows up as the seeds no longer decoding.
 */
#ifndef HY_FUZZ_ENTRY_LAYOUT_H
#define HY_FUZZ_ENTRY_LAYOUT_H

#include <stdint.h>

#define ENT_HDR_FIXED 104u /* bytes before the section table */
#define ENT_SEC_BYTES 32u  /* per section: u32 kind, u32 layer, u64 offset, length, XXH3 */
#define ENT_OFF_HDR   12u  /* u32 header bytes */
#define ENT_OFF_NSEC  16u  /* u32 section count */
#define ENT_OFF_W     24u  /* u32 seam setting W */
#define ENT_OFF_SEAM  28u  /* u32 seam width w */
#define ENT_OFF_N     32u  /* u32 tokens n */
#define ENT_OFF_NB    36u  /* u32 body tokens */
#define ENT_OFF_FP    48u  /* model fingerprint, 32 bytes */
#define ENT_OFF_HSUM  80u  /* u64 XXH3 of header + table, taken with this field zero */
#define ENT_OFF_TOTAL 88u  /* u64 total bytes */

static inline uint32_t ent_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ent_get64(const uint8_t *p)
{
    return (uint64_t)ent_get32(p) | (uint64_t)ent_get32(p + 4) << 32;
}
static inline void ent_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ent_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
