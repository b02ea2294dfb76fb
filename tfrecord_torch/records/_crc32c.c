/* CRC-32C (Castagnoli), as TFRecord frames use it, for the compiled record
 * readers (records/_frames.c, and example/_fastwire.c's one-record reads; each
 * extension links its own copy): the SSE4.2 crc32 instruction where the CPU
 * has it, else an 8-bit table. Checked against the crc32c package by the tests. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t table[256];
static int ready = 0, hardware = 0;

static uint32_t software(uint32_t crc, const uint8_t *p, size_t n) {
    while (n--) {
        crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    }
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t instruction(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--) {
        crc = _mm_crc32_u8(crc, *p++);
    }
    return crc;
}
#define HAVE_INSTRUCTION 1
#endif

void tfr_crc32c_setup(void) {
    uint32_t i, k, c;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        table[i] = c;
    }
#ifdef HAVE_INSTRUCTION
    __builtin_cpu_init();
    hardware = __builtin_cpu_supports("sse4.2");
#endif
    ready = 1;
}

/* The CRC-32C of p[0:n]; force_software for the tests. */
uint32_t tfr_crc32c(const uint8_t *p, size_t n, int force_software) {
    uint32_t crc = 0xFFFFFFFFu;
    if (!ready) {
        tfr_crc32c_setup();
    }
#ifdef HAVE_INSTRUCTION
    if (hardware && !force_software) {
        return ~instruction(crc, p, n);
    }
#endif
    return ~software(crc, p, n);
}

/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tfr_masked_crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = tfr_crc32c(p, n, 0);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
