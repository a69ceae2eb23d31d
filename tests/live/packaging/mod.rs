//! How tollgate ships: OCI images, Docker Compose (checked and run), ECDS, Istio and Envoy Gateway manifests.

mod compose;
mod compose_cluster;
mod compose_configs;
mod ecds;
mod envoy_gateway;
mod images;
mod istio;
