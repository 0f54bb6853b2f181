// Package gowordcount is the example of docs/go.md: a word count written with Beam's Go SDK,
// and its test, which runs on Sundial through the job endpoint the test is given.
package gowordcount

import (
	"fmt"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
)

func splitWords(line string, emit func(string)) {
	for _, w := range strings.Fields(line) {
		emit(strings.ToLower(w))
	}
}

func formatCount(w string, n int) string {
	return fmt.Sprintf("%s: %d", w, n)
}

func init() {
	register.Function2x0(splitWords)
	register.Emitter1[string]()
	register.Function2x1(formatCount)
}

// CountWords turns lines into "word: count" strings.
func CountWords(s beam.Scope, lines beam.PCollection) beam.PCollection {
	s = s.Scope("CountWords")
	words := beam.ParDo(s, splitWords, lines)
	counts := stats.Count(s, words)
	return beam.ParDo(s, formatCount, counts)
}
