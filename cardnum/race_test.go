//go:build race

package cardnum

// raceEnabled: the race detector slows the scan tenfold, so TestFalsePositiveRates draws fewer values.
const raceEnabled = true
