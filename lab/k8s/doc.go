// Package k8s is the end-to-end test of the node agent in a real
// Kubernetes cluster (make e2e-k8s): lab/k8s/e2e.sh builds Kubernetes and
// etcd from the Go module proxy (build-bins.sh, the wrapper module
// kubebin), the images (make image, imagetar), brings up a one-node
// cluster in namespaces of its own (cluster.sh), runs TestKubernetesE2E
// against it and always tears it down. docs/kubernetes.md ("End-to-end
// test in a real cluster") describes it.
//
// The commands under it are the cluster's own pieces: pause (the sandbox
// image), runcwrap (runc without the capabilities the machine's root
// lacks) and imagetar (a one-layer OCI archive of static binaries).
package k8s
