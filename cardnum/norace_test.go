//go:build !race

package cardnum

const raceEnabled = false
