/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * iSCSI, ext4 and SSE4.2's crc32 instruction: what checkpoints carry per
 * section.  crc32c(0, "123456789", 9) == 0xE3069283.
 */
#ifndef EXPERIMENTS_CRC32C_H
#define EXPERIMENTS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of crc's data followed by these n bytes (start with crc = 0). */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* The same by table lookups only (the reference the instruction path is tested against). */
uint32_t crc32c_portable(uint32_t crc, const void *data, size_t n);

#endif /* EXPERIMENTS_CRC32C_H */
