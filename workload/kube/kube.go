// Package kube names the pods of this node: it watches the Kubernetes API
// for the pods scheduled to this node only (field selector
// spec.nodeName=NODE) and answers, from memory and without blocking, which
// pod (namespace, name, labels) a pod UID read from a cgroup belongs to.
//
// Outside a cluster (no KUBERNETES_SERVICE_HOST and no kubeconfig) it is
// disabled: Lookup finds nothing and a log line says so. It must never make
// the caller wait for the API server: the daemon calls Lookup on the report
// path.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// MirrorAnnotation holds, on the API's mirror of a static pod, the UID the
// kubelet gave the static pod itself: the one its cgroup is named after.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Config says where the API server is and which node this is.
type Config struct {
	// NodeName is this node's name (the DaemonSet passes spec.nodeName
	// as NODE_NAME). Required when the watch is enabled: watching every
	// pod of a cluster would cost memory without bound.
	NodeName string
	// InCluster: the process runs in a pod (KUBERNETES_SERVICE_HOST is
	// set); the service account's token and CA are used.
	InCluster bool
	// Kubeconfig is a kubeconfig file used when not InCluster ($KUBECONFIG,
	// for running the daemon by hand against a cluster).
	Kubeconfig string
	// Logger receives the watch's state changes; nil discards them.
	Logger *slog.Logger
}

// ConfigFromEnv reads NODE_NAME, KUBERNETES_SERVICE_HOST and KUBECONFIG
// through getenv (os.Getenv). A --node-name flag, when set, should override
// NodeName.
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{
		NodeName:   getenv("NODE_NAME"),
		InCluster:  getenv("KUBERNETES_SERVICE_HOST") != "",
		Kubeconfig: getenv("KUBECONFIG"),
	}
}

// Pod is what Lookup returns about a pod.
type Pod struct {
	UID       string
	Namespace string
	Name      string
	Labels    map[string]string // shared with the cache: do not modify
}

// Watcher keeps the pods of this node in memory. Its zero value is not
// usable; a disabled Watcher (outside a cluster) is.
type Watcher struct {
	informer cache.SharedIndexInformer // nil when disabled
	cancel   context.CancelFunc
	done     chan struct{}
	close    sync.Once
}

// uidIndex indexes pods by UID and, for mirror pods, by the static pod's
// UID too, so that the UID read from any pod's cgroup finds its pod.
const uidIndex = "uid"

// Start begins watching the pods of cfg.NodeName and returns at once: the
// watch lists and syncs in the background, and Lookup finds nothing until
// it has (Synced says when). Outside a cluster it returns a disabled
// Watcher and logs why. Close stops the watch.
func Start(ctx context.Context, cfg Config) (*Watcher, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rc *rest.Config
	var err error
	switch {
	case cfg.InCluster:
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes in-cluster config: %w (is the service account token mounted?)", err)
		}
	case cfg.Kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kubernetes config from kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	default:
		log.Info("kubernetes pod names disabled: not in a cluster (no KUBERNETES_SERVICE_HOST) and no KUBECONFIG; reports carry container and pod IDs only")
		return &Watcher{}, nil
	}
	return StartREST(ctx, rc, cfg.NodeName, log)
}

// StartREST is Start with a REST config already made.
func StartREST(ctx context.Context, rc *rest.Config, nodeName string, log *slog.Logger) (*Watcher, error) {
	if nodeName == "" {
		return nil, errors.New("kubernetes pod watch: no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or --node-name")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client, err := coreClient(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	lw := cache.NewListWatchFromClient(client, "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", nodeName))
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers:          cache.Indexers{uidIndex: indexUID},
		ObjectDescription: "pods on node " + nodeName,
	})
	if err := inf.SetTransform(trim); err != nil {
		return nil, fmt.Errorf("kubernetes pod watch: %w", err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		log.Warn("kubernetes pod watch failed; retrying with backoff", "node", nodeName, "api", rc.Host, "err", err)
	}); err != nil {
		return nil, fmt.Errorf("kubernetes pod watch: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	// client-go logs through klog; give it ours for this informer.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	w := &Watcher{informer: inf, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		inf.RunWithContext(ctx)
	}()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			log.Info("kubernetes pod watch synced", "node", nodeName, "pods", len(inf.GetStore().ListKeys()))
		}
	}()
	log.Info("kubernetes pod watch started", "node", nodeName, "api", rc.Host)
	return w, nil
}

// Enabled reports whether the watch runs (false outside a cluster).
func (w *Watcher) Enabled() bool { return w.informer != nil }

// Synced reports whether the first list of this node's pods has arrived.
func (w *Watcher) Synced() bool { return w.informer != nil && w.informer.HasSynced() }

// Len is the number of pods held.
func (w *Watcher) Len() int {
	if w.informer == nil {
		return 0
	}
	return len(w.informer.GetStore().ListKeys())
}

// Lookup returns the pod with this UID (as read from a cgroup: the pod's
// UID, or a static pod's own UID). It reads memory only and never waits
// for the API server; before the first sync, when disabled, and for pods
// of other nodes it finds nothing.
func (w *Watcher) Lookup(uid string) (Pod, bool) {
	if uid == "" || !w.Synced() {
		return Pod{}, false
	}
	objs, err := w.informer.GetIndexer().ByIndex(uidIndex, uid)
	if err != nil || len(objs) == 0 {
		return Pod{}, false
	}
	p, ok := objs[0].(*corev1.Pod)
	if !ok {
		return Pod{}, false
	}
	return Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Labels: p.Labels}, true
}

// Close stops the watch and waits for it to end. Safe to call more than
// once, and on a disabled Watcher.
func (w *Watcher) Close() error {
	if w.informer == nil {
		return nil
	}
	w.close.Do(func() {
		w.cancel()
		<-w.done
	})
	return nil
}

func indexUID(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("pod index: got %T, want *v1.Pod", obj)
	}
	keys := []string{string(p.UID)}
	if m := p.Annotations[MirrorAnnotation]; m != "" && m != string(p.UID) {
		keys = append(keys, m)
	}
	return keys, nil
}

// trim keeps only what Lookup needs, so that memory stays small whatever
// the pods' specs and statuses hold.
func trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone: keep as is
	}
	m := metav1.ObjectMeta{
		Name:            p.Name,
		Namespace:       p.Namespace,
		UID:             p.UID,
		ResourceVersion: p.ResourceVersion,
		Labels:          p.Labels,
	}
	if v, ok := p.Annotations[MirrorAnnotation]; ok {
		m.Annotations = map[string]string{MirrorAnnotation: v}
	}
	return &corev1.Pod{ObjectMeta: m}, nil
}

// coreClient is a REST client for the core/v1 API alone. client-go's
// clientset would do the same but links the clients and types of every API
// group: 24 MB more in the binary for one resource.
func coreClient(rc *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	cfg := rest.CopyConfig(rc)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = "timeout-tracer"
	}
	return rest.RESTClientFor(cfg)
}
