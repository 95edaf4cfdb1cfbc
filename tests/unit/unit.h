/*
 * unit.h - helpers the C unit tests share. Include it after <cmocka.h>.
 *
 * assert_cmp() compares two integers and prints both when the comparison
 * fails; rnd() is a seeded xorshift64* generator of the test's own (seed
 * rng_state, never 0), independent of any generator in the code under test.
 */
#ifndef MC_TEST_UNIT_H
#define MC_TEST_UNIT_H

#include <stdint.h>

/* Checks a comparison of two integers, printing both when it fails. */
#define assert_cmp(a, op, b)                                                                       \
    do {                                                                                           \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                                           \
        if (!(a_ op b_))                                                                           \
            fail_msg("%s %s %s: %jd vs %jd", #a, #op, #b, a_, b_);                                 \
    } while (0)

/* The state of rnd(); a test seeds it. */
static uint64_t rng_state __attribute__((unused));

/* The next pseudo-random number (xorshift64*). */
static inline uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

#endif /* MC_TEST_UNIT_H */
