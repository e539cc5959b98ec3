package config

import (
	"fmt"
	"math"
	"strconv"

	"github.com/dustin/go-humanize"
)

// Bytes is a size in bytes, written in the file as a number of bytes or with a unit: "512MiB",
// "1GiB", "64KiB" (powers of 1024), or "500MB", "1GB" (powers of 1000). go-humanize reads it,
// as it reads the sizes of many tools' flags, rather than one more parser of our own.
type Bytes int64

// UnmarshalText reads a size such as "512MiB".
func (b *Bytes) UnmarshalText(text []byte) error {
	n, err := humanize.ParseBytes(string(text))
	if err != nil || n > math.MaxInt64 {
		return fmt.Errorf("want a size in bytes such as 512MiB, 1GiB or 536870912")
	}
	*b = Bytes(n)
	return nil
}

// String writes the size exactly, in the largest power-of-1024 unit that divides it: "512MiB",
// "1536KiB", "1000B".
func (b Bytes) String() string {
	n := int64(b)
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.unit
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
