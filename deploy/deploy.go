// Package deploy holds the Kubernetes manifest of the node agent
// (daemonset.yaml, embedded) and decodes it strictly into the k8s.io/api
// types, so that tests can check what it grants and the capability test can
// run the daemon with exactly the capabilities the DaemonSet gives it.
package deploy

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed daemonset.yaml
var manifest []byte

// Manifest returns the text of daemonset.yaml.
func Manifest() []byte { return bytes.Clone(manifest) }

// Objects decodes every document of daemonset.yaml strictly: an unknown or
// duplicated field, or a kind other than those of the core, apps and rbac
// APIs, is an error.
func Objects() ([]runtime.Object, error) { return decode(manifest) }

// DaemonSet returns the manifest's DaemonSet.
func DaemonSet() (*appsv1.DaemonSet, error) {
	objs, err := Objects()
	if err != nil {
		return nil, err
	}
	var found *appsv1.DaemonSet
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			if found != nil {
				return nil, errors.New("deploy/daemonset.yaml: more than one DaemonSet")
			}
			found = ds
		}
	}
	if found == nil {
		return nil, errors.New("deploy/daemonset.yaml: no DaemonSet")
	}
	return found, nil
}

// Capabilities returns the capabilities the DaemonSet's container adds (it
// drops all others), as Kubernetes spells them: "BPF", "PERFMON", ...
func Capabilities() ([]string, error) {
	ds, err := DaemonSet()
	if err != nil {
		return nil, err
	}
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		return nil, fmt.Errorf("deploy/daemonset.yaml: %d containers, want 1", len(cs))
	}
	sc := cs[0].SecurityContext
	if sc == nil || sc.Capabilities == nil {
		return nil, errors.New("deploy/daemonset.yaml: the container sets no capabilities")
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, string(c))
	}
	return caps, nil
}

// Image returns the image the DaemonSet's container runs: the name `make
// image` gives the image it builds, so that importing bin/tracer-image.tar
// provides exactly what the manifest asks for.
func Image() (string, error) {
	ds, err := DaemonSet()
	if err != nil {
		return "", err
	}
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Image == "" {
		return "", errors.New("deploy/daemonset.yaml: want one container with an image")
	}
	return cs[0].Image, nil
}

// SetprivCaps spells capabilities for setpriv(1) --inh-caps,
// --ambient-caps and --bounding-set: "BPF", "SYS_PTRACE" become
// "+bpf,+sys_ptrace".
func SetprivCaps(caps []string) string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = "+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return strings.Join(out, ",")
}

// decode splits a multi-document YAML stream and decodes each document
// strictly into its typed object.
func decode(data []byte) ([]runtime.Object, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("deploy: build scheme: %w", err)
		}
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("deploy/daemonset.yaml: document %d: %w", n, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			// Strict errors come with the object decoded: still an error.
			return nil, fmt.Errorf("deploy/daemonset.yaml: document %d: %w", n, err)
		}
		if obj.GetObjectKind().GroupVersionKind().Empty() {
			obj.GetObjectKind().SetGroupVersionKind(*gvk)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// isEmpty: a document holding only comments and blank lines.
func isEmpty(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			return false
		}
	}
	return true
}
