//! The webhook's serving certificate when no files are given: the controller makes its own
//! CA and certificate once, keeps them in a Secret that every replica reads, and writes the
//! CA into the `MutatingWebhookConfiguration`'s `caBundle`, so that a plain `kubectl apply`
//! of `deploy/kubernetes` works without cert-manager.
//!
//! Why a Secret and not a certificate per process: every replica serves the webhook and the
//! API server trusts one `caBundle`; the first replica to create the Secret wins (a 409 means
//! another did: it is read back), and the rest serve the same certificate.
//!
//! Both the CA and the certificate are valid for ten years; to rotate, delete the Secret and
//! restart the Deployment (docs/kubernetes.md).

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use crate::KubeError;
use crate::settings::ManagedCert;

/// The PEM texts the webhook serves with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCert {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

const CA_KEY: &str = "ca.crt";
const CERT_KEY: &str = "tls.crt";
const KEY_KEY: &str = "tls.key";
const VALIDITY_YEARS: i16 = 10;

/// The DNS names (and IP addresses) the certificate is for: the Service's names inside the
/// cluster, and any extra `hosts` (a webhook reached by URL).
pub fn subject_names(m: &ManagedCert) -> Vec<String> {
    let svc = format!("{}.{}.svc", m.service_name, m.namespace);
    let mut names = vec![m.service_name.clone(), format!("{}.{}", m.service_name, m.namespace), svc.clone()];
    names.push(format!("{svc}.cluster.local"));
    names.extend(m.hosts.iter().cloned());
    names
}

/// A new CA and a certificate it signed for `names`, valid from yesterday (clock skew) for
/// ten years.
pub fn generate(names: &[String], today: jiff::civil::Date) -> Result<ServingCert, String> {
    let from = today.yesterday().map_err(|e| e.to_string())?;
    let until = from.checked_add(jiff::Span::new().years(VALIDITY_YEARS)).map_err(|e| e.to_string())?;
    let validity = |params: &mut CertificateParams| {
        params.not_before = rcgen::date_time_ymd(i32::from(from.year()), from.month() as u8, from.day() as u8);
        params.not_after = rcgen::date_time_ymd(i32::from(until.year()), until.month() as u8, until.day() as u8);
    };
    let err = |e: rcgen::Error| format!("making the webhook certificate: {e}");

    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca.distinguished_name.push(DnType::CommonName, "fairway webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca);
    let ca_key = KeyPair::generate().map_err(err)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;

    let mut leaf = CertificateParams::new(names.to_vec()).map_err(err)?;
    leaf.distinguished_name.push(DnType::CommonName, names.first().cloned().unwrap_or_default());
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut leaf);
    let leaf_key = KeyPair::generate().map_err(err)?;
    let issuer = Issuer::new(ca, ca_key);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    Ok(ServingCert { ca_pem: ca_cert.pem(), cert_pem: leaf_cert.pem(), key_pem: leaf_key.serialize_pem() })
}

/// The Secret's certificate, made and stored first if there is none; then the CA written
/// into the webhook configuration (if it exists: without it nothing calls the webhook).
pub async fn ensure(client: &kube::Client, m: &ManagedCert) -> Result<ServingCert, KubeError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &m.namespace);
    let cert = match secrets.get_opt(&m.secret_name).await? {
        Some(secret) => from_secret(&secret, m)?,
        None => {
            let today = jiff::Zoned::now().date();
            let made = generate(&subject_names(m), today).map_err(KubeError::Config)?;
            match secrets.create(&PostParams::default(), &to_secret(&made, m)).await {
                Ok(_) => {
                    tracing::info!(secret = %m.secret_name, namespace = %m.namespace, "made the webhook certificate");
                    made
                }
                // Another replica made it first: serve that one.
                Err(kube::Error::Api(e)) if e.code == 409 => from_secret(&secrets.get(&m.secret_name).await?, m)?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    write_ca_bundle(client, m, &cert.ca_pem).await?;
    Ok(cert)
}

fn to_secret(cert: &ServingCert, m: &ManagedCert) -> Secret {
    let data = [(CA_KEY, &cert.ca_pem), (CERT_KEY, &cert.cert_pem), (KEY_KEY, &cert.key_pem)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(m.secret_name.clone()),
            namespace: Some(m.namespace.clone()),
            labels: Some([("app.kubernetes.io/name".to_owned(), "fairway".to_owned())].into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn from_secret(secret: &Secret, m: &ManagedCert) -> Result<ServingCert, KubeError> {
    let field = |key: &str| -> Result<String, KubeError> {
        let bytes = secret.data.as_ref().and_then(|d| d.get(key)).ok_or_else(|| {
            KubeError::Config(format!(
                "Secret {}/{} has no {key:?}: delete it and restart to make a new certificate",
                m.namespace, m.secret_name
            ))
        })?;
        String::from_utf8(bytes.0.clone()).map_err(|_| {
            KubeError::Config(format!("Secret {}/{}: {key:?} is not PEM text", m.namespace, m.secret_name))
        })
    };
    Ok(ServingCert { ca_pem: field(CA_KEY)?, cert_pem: field(CERT_KEY)?, key_pem: field(KEY_KEY)? })
}

/// How often the `caBundle` is checked again: a webhook configuration created or replaced
/// after the controller started (a later `kubectl apply`, a kustomize order) is fixed
/// within this, not at the next restart.
pub const CA_BUNDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes the CA into the webhook configuration every [`CA_BUNDLE_CHECK`], for ever.
pub async fn keep_ca_bundle(client: kube::Client, m: ManagedCert, ca_pem: String) {
    loop {
        tokio::time::sleep(CA_BUNDLE_CHECK).await;
        if let Err(e) = write_ca_bundle(&client, &m, &ca_pem).await {
            tracing::warn!("cannot write the webhook configuration's caBundle: {e}");
        }
    }
}

/// Every webhook of the configuration trusts the CA; written only where it differs, and
/// read again after a conflict (another replica, or `kubectl apply`, wrote in between).
async fn write_ca_bundle(client: &kube::Client, m: &ManagedCert, ca_pem: &str) -> Result<(), KubeError> {
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    for _ in 0..5 {
        let Some(mut config) = configs.get_opt(&m.webhook_configuration).await? else {
            tracing::warn!(
                name = %m.webhook_configuration,
                "no MutatingWebhookConfiguration of that name: the webhook is served but nothing calls it"
            );
            return Ok(());
        };
        let mut changed = false;
        for webhook in config.webhooks.iter_mut().flatten() {
            if webhook.client_config.ca_bundle.as_ref() != Some(&bundle) {
                webhook.client_config.ca_bundle = Some(bundle.clone());
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        let name = m.webhook_configuration.clone();
        match configs.replace(&name, &PostParams::default(), &config).await {
            Ok(_) => {
                tracing::info!(%name, "the webhook configuration trusts the webhook's CA");
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(KubeError::Config(format!(
        "MutatingWebhookConfiguration {}: its caBundle kept changing under us (5 conflicts)",
        m.webhook_configuration
    )))
}

/// The CA in the form a `caBundle` field takes in YAML.
pub fn ca_bundle_base64(ca_pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_is_signed_by_the_ca_and_names_the_service() {
        let m = ManagedCert { hosts: vec!["127.0.0.1".into()], ..ManagedCert::default() };
        let names = subject_names(&m);
        assert!(names.contains(&"fairway-webhook.fairway-system.svc".to_owned()), "{names:?}");
        let cert = generate(&names, jiff::civil::date(2026, 12, 2)).unwrap();
        // A TLS server takes it, and a client trusting only the CA accepts it for the names.
        fairway_server::listen::tls_acceptor_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap();
        use rustls::client::danger::ServerCertVerifier;
        use rustls_pki_types::pem::PemObject;
        let ca = rustls_pki_types::CertificateDer::from_pem_slice(cert.ca_pem.as_bytes()).unwrap();
        let leaf = rustls_pki_types::CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(roots), provider)
                .build()
                .unwrap();
        let at = rustls_pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000));
        for name in ["fairway-webhook.fairway-system.svc", "127.0.0.1"] {
            let server = rustls_pki_types::ServerName::try_from(name).unwrap();
            verifier.verify_server_cert(&leaf, &[], &server, &[], at).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls_pki_types::ServerName::try_from("evil.example").unwrap();
        assert!(verifier.verify_server_cert(&leaf, &[], &other, &[], at).is_err());
        // Ten years on it has expired.
        let late = rustls_pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(2_120_000_000));
        let server = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        assert!(verifier.verify_server_cert(&leaf, &[], &server, &[], late).is_err());
    }
}
