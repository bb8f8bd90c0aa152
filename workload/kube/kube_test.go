package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// No kube-apiserver can run on the development machines, so these tests
// run client-go's real transport, decoding and reflector against an HTTP
// server speaking the API's list/watch protocol for pods: a PodList for
// GET /api/v1/pods, and for ?watch=true a chunked stream of JSON watch
// events (ADDED, MODIFIED, DELETED, BOOKMARK). It serves both ways
// client-go may start: a streaming "watch list" (sendInitialEvents=true,
// the default since client-go 1.35, ending the initial pods with a bookmark
// annotated k8s.io/initial-events-end) and, for API servers that refuse
// it, a list followed by a watch. Every request must carry the field
// selector spec.nodeName=<node>.

const node = "node-a"

type fakeAPI struct {
	t             *testing.T
	watchList     bool // serve sendInitialEvents=true; else refuse it like an old API server
	mu            sync.Mutex
	rv            int
	pods          map[types.UID]*corev1.Pod
	watchers      []chan []byte
	requests      []string // "list", "watch", "watchlist", "refused"
	badSelector   []string
	watchOpened   chan struct{} // gets a value each time a watch stream starts
	initialServed chan struct{}
}

func newFakeAPI(t *testing.T, watchList bool) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, watchList: watchList, rv: 100, pods: map[types.UID]*corev1.Pod{},
		watchOpened: make(chan struct{}, 16)}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return f, srv
}

func pod(uid, ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			Env: []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("x", 4096)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// event applies a change and sends it to every open watch.
func (f *fakeAPI) event(typ string, p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	p = p.DeepCopy()
	p.ResourceVersion = strconv.Itoa(f.rv)
	if typ == "DELETED" {
		delete(f.pods, p.UID)
	} else {
		f.pods[p.UID] = p
	}
	b := watchEvent(typ, p)
	for _, w := range f.watchers {
		w <- b
	}
}

func watchEvent(typ string, obj any) []byte {
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.Error(w, "not served here: "+r.URL.Path, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	f.mu.Lock()
	if sel := q.Get("fieldSelector"); sel != "spec.nodeName="+node {
		f.badSelector = append(f.badSelector, sel)
		f.mu.Unlock()
		status(w, http.StatusBadRequest, "BadRequest", "test server wants fieldSelector=spec.nodeName="+node)
		return
	}
	if q.Get("watch") != "true" {
		f.requests = append(f.requests, "list")
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}
		for _, p := range f.pods {
			list.Items = append(list.Items, *p)
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
		return
	}
	initial := q.Get("sendInitialEvents") == "true"
	if initial && !f.watchList {
		f.requests = append(f.requests, "refused")
		f.mu.Unlock()
		status(w, http.StatusUnprocessableEntity, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
		return
	}
	ch := make(chan []byte, 64)
	f.watchers = append(f.watchers, ch)
	var first [][]byte
	if initial {
		f.requests = append(f.requests, "watchlist")
		for _, p := range f.pods {
			first = append(first, watchEvent("ADDED", p))
		}
		first = append(first, watchEvent("BOOKMARK", &corev1.Pod{
			TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(f.rv),
				Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}))
	} else {
		f.requests = append(f.requests, "watch")
	}
	f.mu.Unlock()
	defer f.unsubscribe(ch)

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	for _, b := range first {
		w.Write(b)
	}
	fl.Flush()
	f.watchOpened <- struct{}{}
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-ch:
			if _, err := w.Write(b); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func (f *fakeAPI) unsubscribe(ch chan []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.watchers {
		if c == ch {
			f.watchers = append(f.watchers[:i], f.watchers[i+1:]...)
			return
		}
	}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}

// kubeconfig writes a kubeconfig for the test server, so that the tests go
// through the same config loading as `KUBECONFIG=... tracer daemon`.
func kubeconfig(t *testing.T, url string) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q}
users:
- name: test
  user: {token: test-token}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, url)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond until it holds. The limit only keeps a broken watch
// from hanging the test; nothing here asserts on time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchNodePods(t *testing.T) {
	for _, tc := range []struct {
		name      string
		watchList bool
		requests  string // the first requests client-go makes
	}{
		{"watch list", true, "watchlist"},
		{"list then watch (API server refuses watch list)", false, "refused list watch"},
	} {
		t.Run(tc.name, func(t *testing.T) { testWatch(t, tc.watchList, tc.requests) })
	}
}

func testWatch(t *testing.T, watchList bool, wantRequests string) {
	api, srv := newFakeAPI(t, watchList)
	const (
		uidA   = "2f4c2b8e-1d7a-4f7e-9b1e-0c3f5e6a7b8c"
		uidB   = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
		uidC   = "0b0b0b0b-1c1c-4d2d-8e3e-4f4f4f4f4f4f"
		mirror = "8f3c2a1b9d7e6f5a4b3c2d1e0f9a8b7c" // a static pod's own UID
	)
	api.event("ADDED", pod(uidA, "shop", "api-0", map[string]string{"app": "api"}))
	static := pod(uidB, "kube-system", "kube-apiserver-node-a", nil)
	static.Annotations = map[string]string{MirrorAnnotation: mirror, "big": strings.Repeat("y", 1024)}
	api.event("ADDED", static)

	w, err := Start(t.Context(), Config{NodeName: node, Kubeconfig: kubeconfig(t, srv.URL), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Enabled() {
		t.Fatal("watcher disabled with a kubeconfig")
	}
	<-api.watchOpened
	waitFor(t, "first sync", w.Synced)

	if p, ok := w.Lookup(uidA); !ok || p.Namespace != "shop" || p.Name != "api-0" || p.Labels["app"] != "api" || p.UID != uidA {
		t.Errorf("Lookup(A) = %+v %v", p, ok)
	}
	if p, ok := w.Lookup(mirror); !ok || p.Name != "kube-apiserver-node-a" || p.UID != uidB {
		t.Errorf("Lookup(static pod's own UID) = %+v %v, want its mirror pod", p, ok)
	}
	if _, ok := w.Lookup(uidC); ok {
		t.Error("found a pod that does not exist")
	}

	api.event("ADDED", pod(uidC, "shop", "worker-0", nil))
	waitFor(t, "ADDED pod C", func() bool { _, ok := w.Lookup(uidC); return ok })
	api.event("MODIFIED", pod(uidA, "shop", "api-0", map[string]string{"app": "api", "version": "2"}))
	waitFor(t, "MODIFIED pod A", func() bool { p, _ := w.Lookup(uidA); return p.Labels["version"] == "2" })
	api.event("DELETED", pod(uidC, "shop", "worker-0", nil))
	waitFor(t, "DELETED pod C", func() bool { _, ok := w.Lookup(uidC); return !ok })
	if n := w.Len(); n != 2 {
		t.Errorf("holds %d pods, want 2", n)
	}

	// The API server drops the watch (a restart, a load balancer's idle
	// timeout): client-go watches again and the cache stays current.
	srv.CloseClientConnections()
	<-api.watchOpened
	api.event("MODIFIED", pod(uidA, "shop", "api-0", map[string]string{"app": "api", "version": "3"}))
	waitFor(t, "MODIFIED pod A after the watch was re-opened", func() bool { p, _ := w.Lookup(uidA); return p.Labels["version"] == "3" })

	// Only what Lookup needs is kept: not the spec, not other annotations.
	for _, obj := range w.informer.GetStore().List() {
		p := obj.(*corev1.Pod)
		if len(p.Spec.Containers) != 0 || p.Annotations["big"] != "" {
			t.Errorf("cache keeps more than names: %+v", p)
		}
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.badSelector) > 0 {
		t.Errorf("requests without the node's field selector: %q", api.badSelector)
	}
	if got := strings.Join(api.requests, " "); !strings.HasPrefix(got, wantRequests) {
		t.Errorf("client-go made requests %q, want them to start with %q", got, wantRequests)
	}
}

// Lookup never waits for the API server: before the first list arrives it
// answers "not found" at once.
func TestLookupBeforeSync(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // an API server that never answers
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	w, err := Start(t.Context(), Config{NodeName: node, Kubeconfig: kubeconfig(t, srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Lookup("2f4c2b8e-1d7a-4f7e-9b1e-0c3f5e6a7b8c"); ok || w.Synced() {
		t.Error("found a pod before any list arrived")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close() // twice is fine
}

func TestDisabledOutsideCluster(t *testing.T) {
	var logs strings.Builder
	cfg := ConfigFromEnv(func(string) string { return "" })
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.Enabled() || w.Synced() || w.Len() != 0 {
		t.Error("disabled watcher claims to run")
	}
	if _, ok := w.Lookup("2f4c2b8e-1d7a-4f7e-9b1e-0c3f5e6a7b8c"); ok {
		t.Error("disabled watcher found a pod")
	}
	if !strings.Contains(logs.String(), "kubernetes pod names disabled") {
		t.Errorf("no log line says the watch is disabled: %q", logs.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := Start(t.Context(), Config{Kubeconfig: kubeconfig(t, "http://127.0.0.1:1")}); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node name: %v, want an error naming NODE_NAME", err)
	}
	if _, err := Start(t.Context(), Config{NodeName: node, Kubeconfig: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	cfg := ConfigFromEnv(func(k string) string {
		return map[string]string{"NODE_NAME": "n1", "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBECONFIG": "/k"}[k]
	})
	if cfg.NodeName != "n1" || !cfg.InCluster || cfg.Kubeconfig != "/k" {
		t.Errorf("ConfigFromEnv = %+v", cfg)
	}
	// In a "cluster" without a service account token: a clear error.
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, err := Start(t.Context(), Config{NodeName: node, InCluster: true}); err == nil || !strings.Contains(err.Error(), "service account") {
		t.Errorf("in cluster without a token: %v", err)
	}
}
