package sim

import "io"

// What the tests (package sim_test, external so that they can use bench/testkit, which imports sim) see
// of the simulator's insides.

// IAMForTest returns the instance's IAM.
func (a *AppConfig) IAMForTest() *IAM { return a.iam }

// The App Configuration's error bodies, and the pattern of the platforms' generated bodies.
var (
	ACBodyNotFound     = acBodyNotFound
	ACBodyUnauthorized = acBodyUnauthorized
	BytesPatternBlock  = bytesPatternBlock
)

// PatternSource yields n bytes of the 'a'+i%26 pattern.
func PatternSource(n int64) io.Reader { return &patternReader{left: n} }
