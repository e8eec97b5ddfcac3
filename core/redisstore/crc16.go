package redisstore

import (
	"github.com/ratekit/ratekit/internal/keys"
)

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses to map a key to one of its 16384 slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// numSlots is the number of Redis Cluster hash slots.
const numSlots = 16384

// slot returns the Redis Cluster hash slot of key: CRC16 of its hash tag
// (keys.HashTag) modulo 16384, as CLUSTER KEYSLOT computes it.
func slot(key string) int {
	return int(crc16(keys.HashTag(key)) % numSlots)
}
