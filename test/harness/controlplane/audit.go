package controlplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests and the
// bench read from Cluster.AuditLog.
type AuditEvent struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	RequestURI string `json:"requestURI"`
	// UserAgent tells kube-controller-manager's controllers apart: each
	// appends its name (".../persistent-volume-binder").
	UserAgent string `json:"userAgent"`
	// ObjectRef is nil for a non-resource URL.
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	ResponseStatus  *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// ReadAuditLog calls each with every request of the audit log at path
// once, in the log's order: a request logged at several stages (a watch's
// ResponseStarted and ResponseComplete) is passed at its first.
func ReadAuditLog(path string, each func(AuditEvent)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		each(e)
	}
	return sc.Err()
}
