package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"k8s.io/component-base/metrics/testutil"
)

// Scrape reads a Prometheus text endpoint.
func Scrape(ctx context.Context, url string) (testutil.Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s: %.300s", url, resp.Status, body)
	}
	m := testutil.NewMetrics()
	if err := testutil.ParseMetrics(string(body), &m); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return m, nil
}

// MetricValue sums the samples of metric whose labels include want.
func MetricValue(m testutil.Metrics, metric string, want map[string]string) float64 {
	var sum float64
	for _, s := range m[metric] {
		labels := map[string]string{}
		for k, v := range s.Metric {
			labels[string(k)] = string(v)
		}
		ok := true
		for k, v := range want {
			if labels[k] != v {
				ok = false
			}
		}
		if ok {
			sum += float64(s.Value)
		}
	}
	return sum
}
