package gowordcount

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

func TestCountWords(t *testing.T) {
	p, s := beam.NewPipelineWithRoot()
	lines := beam.Create(s, "the cat", "The dog", "a cat and a dog")
	passert.Equals(s, CountWords(s, lines),
		"the: 2", "cat: 2", "dog: 2", "a: 2", "and: 1")
	ptest.RunAndValidate(t, p)
}

// TestMain lets ptest read the runner flags (--runner, --endpoint, --environment_type, ...).
func TestMain(m *testing.M) {
	ptest.Main(m)
}
