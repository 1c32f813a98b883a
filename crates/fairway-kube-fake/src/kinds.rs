//! The resources the fake serves: one static table, so that routing, discovery, storage and
//! error messages all read the same facts (group, version, plural, scope, subresources).

/// A served resource. The discriminant indexes the store's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Kind {
    Namespace,
    Node,
    Pod,
    ResourceQuota,
    Event,
    Secret,
    ConfigMap,
    Service,
    PriorityClass,
    Job,
    Lease,
    MutatingWebhookConfiguration,
    PaddleJob,
}

pub(crate) struct KindInfo {
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub namespaced: bool,
    /// Has a `status` subresource: the main resource ignores `status` in writes, and the
    /// subresource changes nothing else.
    pub status: bool,
    /// Keeps `metadata.generation`, bumped when the spec changes.
    pub generation: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
}

const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

impl Kind {
    pub(crate) const ALL: [Kind; 13] = [
        Kind::Namespace,
        Kind::Node,
        Kind::Pod,
        Kind::ResourceQuota,
        Kind::Event,
        Kind::Secret,
        Kind::ConfigMap,
        Kind::Service,
        Kind::PriorityClass,
        Kind::Job,
        Kind::Lease,
        Kind::MutatingWebhookConfiguration,
        Kind::PaddleJob,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn info(self) -> &'static KindInfo {
        &INFOS[self.index()]
    }

    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Kind::Namespace
            | Kind::Node
            | Kind::Pod
            | Kind::ResourceQuota
            | Kind::Event
            | Kind::Secret
            | Kind::ConfigMap
            | Kind::Service => "v1",
            Kind::PriorityClass => "scheduling.k8s.io/v1",
            Kind::Job => "batch/v1",
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::MutatingWebhookConfiguration => "admissionregistration.k8s.io/v1",
            Kind::PaddleJob => "kubeflow.org/v1",
        }
    }

    /// The resource as the API server names it in messages: `pods`, `jobs.batch`.
    pub(crate) fn qualified(self) -> String {
        let info = self.info();
        if info.group.is_empty() { info.plural.to_owned() } else { format!("{}.{}", info.plural, info.group) }
    }

    /// The kind as the API server names it in validation messages: `Pod`, `Job.batch`.
    pub(crate) fn qualified_kind(self) -> String {
        let info = self.info();
        if info.group.is_empty() { info.kind.to_owned() } else { format!("{}.{}", info.kind, info.group) }
    }

    pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| {
            let i = k.info();
            i.group == group && i.version == version && i.plural == plural
        })
    }

    pub(crate) fn by_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.info().plural == plural)
    }
}

static INFOS: [KindInfo; 13] = [
    KindInfo {
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        group: "",
        version: "v1",
        namespaced: false,
        status: true,
        generation: false,
        verbs: &["create", "delete", "get", "list", "patch", "update", "watch"],
        short_names: &["ns"],
    },
    KindInfo {
        kind: "Node",
        plural: "nodes",
        singular: "node",
        group: "",
        version: "v1",
        namespaced: false,
        status: true,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["no"],
    },
    KindInfo {
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        group: "",
        version: "v1",
        namespaced: true,
        status: true,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["po"],
    },
    KindInfo {
        kind: "ResourceQuota",
        plural: "resourcequotas",
        singular: "resourcequota",
        group: "",
        version: "v1",
        namespaced: true,
        status: true,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["quota"],
    },
    KindInfo {
        kind: "Event",
        plural: "events",
        singular: "event",
        group: "",
        version: "v1",
        namespaced: true,
        status: false,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["ev"],
    },
    KindInfo {
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        group: "",
        version: "v1",
        namespaced: true,
        status: false,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &[],
    },
    KindInfo {
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        group: "",
        version: "v1",
        namespaced: true,
        status: false,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["cm"],
    },
    KindInfo {
        kind: "Service",
        plural: "services",
        singular: "service",
        group: "",
        version: "v1",
        namespaced: true,
        status: true,
        generation: false,
        verbs: &["create", "delete", "get", "list", "patch", "update", "watch"],
        short_names: &["svc"],
    },
    KindInfo {
        kind: "PriorityClass",
        plural: "priorityclasses",
        singular: "priorityclass",
        group: "scheduling.k8s.io",
        version: "v1",
        namespaced: false,
        status: false,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &["pc"],
    },
    KindInfo {
        kind: "Job",
        plural: "jobs",
        singular: "job",
        group: "batch",
        version: "v1",
        namespaced: true,
        status: true,
        generation: true,
        verbs: ALL_VERBS,
        short_names: &[],
    },
    KindInfo {
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        group: "coordination.k8s.io",
        version: "v1",
        namespaced: true,
        status: false,
        generation: false,
        verbs: ALL_VERBS,
        short_names: &[],
    },
    KindInfo {
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        singular: "mutatingwebhookconfiguration",
        group: "admissionregistration.k8s.io",
        version: "v1",
        namespaced: false,
        status: false,
        generation: true,
        verbs: ALL_VERBS,
        short_names: &[],
    },
    KindInfo {
        kind: "PaddleJob",
        plural: "paddlejobs",
        singular: "paddlejob",
        group: "kubeflow.org",
        version: "v1",
        namespaced: true,
        status: true,
        generation: true,
        verbs: ALL_VERBS,
        short_names: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_discriminant_order() {
        for (i, k) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i);
            assert_eq!(format!("{k:?}"), k.info().kind);
        }
    }
}
