package frontend

import (
	"testing"

	"github.com/fairlead/fairlead/bench/testkit"
)

// FuzzFramer: the framer never panics, and its verdict does not depend on how the bytes are split into
// reads.
func FuzzFramer(f *testing.F) {
	for _, s := range testkit.FramingSeeds {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		whole, wholeState := frameVerdict(string(in))
		i := int(cut) % (len(in) + 1)
		split, splitState := frameVerdict(string(in[:i]), string(in[i:]))
		if whole != split || (whole == 0 && wholeState != splitState) {
			t.Fatalf("whole: %d (state %d), split at %d: %d (state %d)", whole, wholeState, i, split, splitState)
		}
	})
}
