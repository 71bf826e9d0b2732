package provisioner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
)

// registrations records the names of the metrics registered through it.
type registrations struct {
	metrics.KubeRegistry
	names []string
}

func (r *registrations) MustRegister(cs ...metrics.Registerable) {
	for _, c := range cs {
		r.names = append(r.names, c.FQName())
	}
	r.KubeRegistry.MustRegister(cs...)
}

// Every metric of the provisioner (and of its capacity publishing) is in
// docs/operations.md's metric table.
func TestMetricsDocumented(t *testing.T) {
	reg := &registrations{KubeRegistry: metrics.NewKubeRegistry()}
	NewMetrics(reg)
	if len(reg.names) == 0 {
		t.Fatal("no metric registered")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.names {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/operations.md does not name the metric %s", name)
			}
		})
	}
}
