//! S3 requests `object_store` 0.14 does not expose, or answers with an error where an
//! [`super::ObjectStorage`] needs an answer:
//!
//! * `ListMultipartUploads` and `AbortMultipartUpload`. A process killed between
//!   `CreateMultipartUpload` and `CompleteMultipartUpload` leaves its parts in the bucket:
//!   invisible to listings, billed, kept until aborted. The storage's sweep decides which to
//!   abort (under its root, old enough, named by the checkpoint layout).
//! * `ListObjectsV2` with every key as stored. `object_store` turns each listed key into its
//!   `Path`, which refuses empty, `.` and `..` segments, so one object of another system
//!   named `root/shared/a//b` fails every listing of the prefix with it; the storage lists
//!   through here when that happens and leaves such keys out (no object of ours has one).
//!
//! The requests use the credentials of the storage's `object_store` client
//! (`AmazonS3::credentials`), are signed with `object_store`'s SigV4 signer (`AwsAuthorizer`),
//! and are sent with an HTTP client of the same client settings (`ReqwestConnector` over the
//! `ClientOptions` the settings build).

use std::sync::Arc;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpRequest, HttpRequestBody, ReqwestConnector,
};
use serde::Deserialize;

/// One unfinished multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Upload {
    /// The object key it uploads to (the whole key: the storage's root included).
    pub key: String,
    /// S3's id of the upload.
    pub upload_id: String,
    /// When it was created, ms since the Unix epoch by the server's clock; `None` when the
    /// server's timestamp does not parse (such an upload is never taken for old).
    pub initiated_ms: Option<u64>,
}

/// Why a request failed: its text, the HTTP status if the server answered, and whether
/// trying again may succeed (a network error, 5xx, 408, 429).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestError {
    pub detail: String,
    pub status: Option<u16>,
    pub transient: bool,
}

impl RequestError {
    fn permanent(detail: impl Into<String>) -> RequestError {
        RequestError {
            detail: detail.into(),
            status: None,
            transient: false,
        }
    }

    fn network(detail: String) -> RequestError {
        RequestError {
            detail,
            status: None,
            transient: true,
        }
    }
}

/// Pages of one listing at most (S3 answers up to 1,000 entries a page): a server whose
/// markers never end the listing stops here instead of looping.
const MAX_PAGES: usize = 1_000_000;

/// One object of a `ListObjectsV2` listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The whole key, decoded.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was stored, ms since the Unix epoch by the server's clock (0 for a time before
    /// the epoch).
    pub last_modified_ms: u64,
}

/// The bucket's endpoint and what signs and sends requests to it.
#[derive(Debug, Clone)]
pub(crate) struct S3Requests {
    /// `https://s3.<region>.amazonaws.com/<bucket>`, `<endpoint>/<bucket>`, or the endpoint
    /// itself for virtual-hosted requests, as `object_store` builds it; no trailing `/`.
    bucket_url: String,
    region: String,
    credentials: object_store::aws::AwsCredentialProvider,
    client: HttpClient,
    /// `aws_skip_signature`: requests go unsigned (a public bucket).
    unsigned: bool,
}

impl S3Requests {
    /// For `bucket` as `store` reaches it, the store built from `config` (`object_store`
    /// settings in the order they were applied). `Ok(None)` for S3 Express One Zone buckets,
    /// whose session-based signing this module does not do: their unfinished uploads are left
    /// to the bucket's lifecycle rules, and their listings to `object_store` alone.
    pub(crate) fn new(
        bucket: &str,
        config: &[(AmazonS3ConfigKey, String)],
        store: &AmazonS3,
    ) -> Result<Option<S3Requests>, String> {
        let mut builder = AmazonS3Builder::new();
        let mut client_options = ClientOptions::new();
        for (key, value) in config {
            builder = builder.with_config(*key, value);
            if let AmazonS3ConfigKey::Client(k) = key {
                client_options = client_options.with_config(*k, value);
            }
        }
        // As the store's: the URL's bucket whatever the settings say.
        builder = builder.with_bucket_name(bucket);
        // The words `object_store` reads as true (its `Parse for bool`).
        let flag = |key| {
            builder.get_config_value(&key).is_some_and(|v| {
                matches!(
                    v.to_ascii_lowercase().as_str(),
                    "1" | "true" | "on" | "yes" | "y"
                )
            })
        };
        if flag(AmazonS3ConfigKey::S3Express) {
            return Ok(None);
        }
        let region = builder
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".to_string());
        let endpoint = builder
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Endpoint));
        let bucket_url = bucket_url(
            bucket,
            &region,
            endpoint.as_deref(),
            flag(AmazonS3ConfigKey::VirtualHostedStyleRequest),
        );
        if bucket_url.starts_with("http://") {
            client_options = client_options.with_allow_http(true);
        }
        let client = ReqwestConnector::default()
            .connect(&client_options)
            .map_err(|e| e.to_string())?;
        Ok(Some(S3Requests {
            bucket_url,
            region,
            credentials: Arc::clone(store.credentials()),
            client,
            unsigned: flag(AmazonS3ConfigKey::SkipSignature),
        }))
    }

    /// Every unfinished upload whose key starts with `prefix`, all pages.
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<Upload>, RequestError> {
        let mut uploads = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("uploads", ""), ("prefix", prefix)];
            if let Some((key, id)) = &markers {
                query.push(("key-marker", key));
                query.push(("upload-id-marker", id));
            }
            let body = self.send("GET", "", &query).await?;
            let page = parse_page(&body).map_err(RequestError::permanent)?;
            uploads.extend(page.uploads);
            match page.next {
                None => return Ok(uploads),
                Some(next) if markers.as_ref() == Some(&next) => {
                    return Err(RequestError::permanent(format!(
                        "ListMultipartUploads returned the same markers twice ({next:?})"
                    )))
                }
                Some(next) => markers = Some(next),
            }
        }
        Err(RequestError::permanent(format!(
            "ListMultipartUploads did not end within {MAX_PAGES} pages"
        )))
    }

    /// Every object whose key starts with `prefix`, all pages, keys as stored (requested
    /// URL-encoded, so that no key can break the response's XML, and decoded here).
    pub(crate) async fn list_objects(&self, prefix: &str) -> Result<Vec<Listed>, RequestError> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![
                ("list-type", "2"),
                ("encoding-type", "url"),
                ("prefix", prefix),
            ];
            if let Some(t) = &token {
                query.push(("continuation-token", t));
            }
            let body = self.send("GET", "", &query).await?;
            let page = parse_objects_page(&body).map_err(RequestError::permanent)?;
            objects.extend(page.objects);
            match page.next {
                None => return Ok(objects),
                Some(next) if token.as_ref() == Some(&next) => {
                    return Err(RequestError::permanent(format!(
                        "ListObjectsV2 returned the same continuation token twice ({next:?})"
                    )))
                }
                Some(next) => token = Some(next),
            }
        }
        Err(RequestError::permanent(format!(
            "ListObjectsV2 did not end within {MAX_PAGES} pages"
        )))
    }

    /// Aborts upload `upload_id` of `key`; an upload already gone (completed or aborted
    /// meanwhile: 404 `NoSuchUpload`) counts as aborted.
    pub(crate) async fn abort(&self, key: &str, upload_id: &str) -> Result<(), RequestError> {
        match self.send("DELETE", key, &[("uploadId", upload_id)]).await {
            Err(e) if e.status == Some(404) && e.detail.contains("NoSuchUpload") => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Sends a signed `method` request for object `key` (`""`: the bucket) with `query`;
    /// returns the body of a 2xx response.
    async fn send(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
    ) -> Result<bytes::Bytes, RequestError> {
        let url = request_url(&self.bucket_url, key, query);
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .body(HttpRequestBody::empty())
            .map_err(|e| RequestError::permanent(format!("request {url}: {e}")))?;
        self.sign(&mut request).await?;
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| RequestError::network(format!("{method} {url}: {e}")))?;
        let status = response.status().as_u16();
        let body = response.into_body().bytes().await.map_err(|e| {
            RequestError::network(format!("{method} {url}: reading the response: {e}"))
        })?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        Err(RequestError {
            detail: format!(
                "{status} from {method} {url}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            ),
            status: Some(status),
            transient: status >= 500 || status == 408 || status == 429,
        })
    }

    async fn sign(&self, request: &mut HttpRequest) -> Result<(), RequestError> {
        if self.unsigned {
            return Ok(());
        }
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| RequestError::network(format!("credentials: {e}")))?;
        AwsAuthorizer::new(&credential, "s3", &self.region)
            .try_authorize(request, None)
            .map_err(|e| RequestError::permanent(format!("signing: {e}")))
    }
}

/// The URL of `bucket`'s requests, as `object_store` 0.14 builds it (`AmazonS3Builder::build`).
fn bucket_url(bucket: &str, region: &str, endpoint: Option<&str>, virtual_hosted: bool) -> String {
    match (endpoint, virtual_hosted) {
        (Some(e), true) => e.trim_end_matches('/').to_string(),
        (Some(e), false) => format!("{}/{bucket}", e.trim_end_matches('/')),
        (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
        (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
    }
}

/// `bucket_url/<key>?<query>`, every byte of the key's segments and of the query outside
/// RFC 3986's unreserved set percent-encoded: what SigV4's canonical request encodes, so the
/// signature the signer computes from the URL matches the server's.
fn request_url(bucket_url: &str, key: &str, query: &[(&str, &str)]) -> String {
    let mut url = bucket_url.to_string();
    for segment in key.split('/').filter(|_| !key.is_empty()) {
        url.push('/');
        url.push_str(&encode(segment));
    }
    // The bucket itself: `<endpoint>/<bucket>` as `object_store` requests it, `/` on a
    // virtual-hosted URL that has no path.
    if key.is_empty()
        && !bucket_url
            .split_once("://")
            .is_some_and(|(_, r)| r.contains('/'))
    {
        url.push('/');
    }
    for (i, (k, v)) in query.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.push_str(&encode(k));
        url.push('=');
        url.push_str(&encode(v));
    }
    url
}

/// `s` with every byte outside `A-Z a-z 0-9 - . _ ~` as `%XX`.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One page of a listing: its uploads, and the markers of the next page if it is truncated.
#[derive(Debug, PartialEq, Eq)]
struct Page {
    uploads: Vec<Upload>,
    next: Option<(String, String)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListResultXml {
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_key_marker: Option<String>,
    #[serde(default)]
    next_upload_id_marker: Option<String>,
    #[serde(default, rename = "Upload")]
    uploads: Vec<UploadXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UploadXml {
    key: String,
    upload_id: String,
    #[serde(default)]
    initiated: Option<String>,
}

/// Parses a `ListMultipartUploadsResult` document. A truncated page without both markers is
/// an error: the next request could not go on from it.
fn parse_page(body: &[u8]) -> Result<Page, String> {
    let text = std::str::from_utf8(body)
        .map_err(|e| format!("ListMultipartUploads: the response is not UTF-8: {e}"))?;
    let xml: ListResultXml = quick_xml::de::from_str(text)
        .map_err(|e| format!("ListMultipartUploads: unreadable response: {e}"))?;
    let uploads = xml
        .uploads
        .into_iter()
        .map(|u| Upload {
            initiated_ms: u.initiated.as_deref().and_then(parse_time),
            key: u.key,
            upload_id: u.upload_id,
        })
        .collect();
    let next = if xml.is_truncated {
        match (xml.next_key_marker, xml.next_upload_id_marker) {
            (Some(k), Some(u)) if !k.is_empty() => Some((k, u)),
            _ => return Err("ListMultipartUploads: a truncated page without next markers".into()),
        }
    } else {
        None
    };
    Ok(Page { uploads, next })
}

/// One page of an object listing: its objects, and the token of the next page if it is
/// truncated.
#[derive(Debug, PartialEq, Eq)]
struct ObjectsPage {
    objects: Vec<Listed>,
    next: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListBucketResultXml {
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_continuation_token: Option<String>,
    #[serde(default)]
    encoding_type: Option<String>,
    #[serde(default)]
    contents: Vec<ContentsXml>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ContentsXml {
    key: String,
    size: u64,
    last_modified: String,
}

/// Parses a `ListBucketResult` (ListObjectsV2) document. Keys are percent-decoded when the
/// response says `EncodingType` `url` (and must then decode to UTF-8); a truncated page
/// without a continuation token, or an object without a readable time, is an error.
fn parse_objects_page(body: &[u8]) -> Result<ObjectsPage, String> {
    let text = std::str::from_utf8(body)
        .map_err(|e| format!("ListObjectsV2: the response is not UTF-8: {e}"))?;
    let xml: ListBucketResultXml = quick_xml::de::from_str(text)
        .map_err(|e| format!("ListObjectsV2: unreadable response: {e}"))?;
    let url_encoded = xml.encoding_type.as_deref() == Some("url");
    let mut objects = Vec::with_capacity(xml.contents.len());
    for c in xml.contents {
        let key = if url_encoded {
            decode(&c.key)
                .ok_or_else(|| format!("ListObjectsV2: bad URL-encoded key {:?}", c.key))?
        } else {
            c.key
        };
        let ms = chrono::DateTime::parse_from_rfc3339(c.last_modified.trim())
            .map_err(|e| format!("ListObjectsV2: time {:?} of {key:?}: {e}", c.last_modified))?
            .timestamp_millis();
        objects.push(Listed {
            key,
            size: c.size,
            last_modified_ms: u64::try_from(ms).unwrap_or(0),
        });
    }
    let next = match (xml.is_truncated, xml.next_continuation_token) {
        (false, _) => None,
        (true, Some(t)) if !t.is_empty() => Some(t),
        (true, _) => {
            return Err("ListObjectsV2: a truncated page without a continuation token".into())
        }
    };
    Ok(ObjectsPage { objects, next })
}

/// `s` decoded as S3 URL-encodes listed keys (form encoding: `+` for a space, `%XX` for other
/// bytes; botocore decodes them with `unquote_plus` too); `None` for a bad escape or bytes
/// that are not UTF-8.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// An RFC 3339 timestamp (`2026-12-07T13:09:54.000Z`) as ms since the Unix epoch; `None` if it
/// does not parse or lies before the epoch.
fn parse_time(s: &str) -> Option<u64> {
    let t = chrono::DateTime::parse_from_rfc3339(s.trim()).ok()?;
    u64::try_from(t.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket>
  <KeyMarker></KeyMarker>
  <UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>root/shared/2-5-00000000000000ff.sst</NextKeyMarker>
  <NextUploadIdMarker>id-2</NextUploadIdMarker>
  <Prefix>root/</Prefix>
  <MaxUploads>2</MaxUploads>
  <IsTruncated>true</IsTruncated>
  <Upload>
    <Key>root/chk-1/abc/000009.sst</Key>
    <UploadId>id-1</UploadId>
    <Initiator><ID>x</ID><DisplayName>y</DisplayName></Initiator>
    <Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>
    <StorageClass>STANDARD</StorageClass>
    <Initiated>2026-12-07T13:09:54.250Z</Initiated>
  </Upload>
  <Upload>
    <Key>root/shared/a&amp;b.sst</Key>
    <UploadId>id-2</UploadId>
    <Initiated>not a time</Initiated>
  </Upload>
</ListMultipartUploadsResult>"#;

    #[test]
    fn a_truncated_page_gives_its_uploads_and_the_next_markers() {
        let page = parse_page(PAGE.as_bytes()).unwrap();
        assert_eq!(
            page.uploads,
            [
                Upload {
                    key: "root/chk-1/abc/000009.sst".into(),
                    upload_id: "id-1".into(),
                    initiated_ms: Some(1_796_648_994_250),
                },
                Upload {
                    key: "root/shared/a&b.sst".into(),
                    upload_id: "id-2".into(),
                    initiated_ms: None,
                },
            ]
        );
        assert_eq!(
            page.next,
            Some(("root/shared/2-5-00000000000000ff.sst".into(), "id-2".into()))
        );
    }

    #[test]
    fn the_last_page_and_an_empty_listing_have_no_markers() {
        let last = PAGE.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(parse_page(last.as_bytes()).unwrap().next, None);
        let empty = "<ListMultipartUploadsResult><Bucket>b</Bucket>\
                     <IsTruncated>false</IsTruncated></ListMultipartUploadsResult>";
        assert_eq!(
            parse_page(empty.as_bytes()).unwrap(),
            Page {
                uploads: vec![],
                next: None
            }
        );
    }

    #[test]
    fn damaged_pages_are_errors_not_panics() {
        let no_markers = PAGE.replace(
            "<NextKeyMarker>root/shared/2-5-00000000000000ff.sst</NextKeyMarker>",
            "",
        );
        assert!(parse_page(no_markers.as_bytes()).is_err());
        assert!(parse_page(b"\xff\xfe").is_err());
        assert!(
            parse_page(b"<Error><Code>AccessDenied</Code></Error>").is_ok_and(|p| {
                // An error document read as a page has no uploads; `send` never passes one here
                // (it returns non-2xx statuses as errors), but it must not panic either.
                p.uploads.is_empty() && p.next.is_none()
            })
        );
        for cut in 0..PAGE.len() {
            if PAGE.is_char_boundary(cut) {
                let _ = parse_page(&PAGE.as_bytes()[..cut]);
            }
        }
        let no_id = PAGE.replace("<UploadId>id-1</UploadId>", "");
        assert!(parse_page(no_id.as_bytes()).is_err());
    }

    #[test]
    fn urls_encode_keys_and_queries_as_sigv4_does() {
        assert_eq!(
            request_url(
                "http://h:9/b",
                "r/shared/1-2-ab.sst",
                &[("uploadId", "a+b/c=")]
            ),
            "http://h:9/b/r/shared/1-2-ab.sst?uploadId=a%2Bb%2Fc%3D"
        );
        assert_eq!(
            request_url(
                "https://b.s3.eu-west-1.amazonaws.com",
                "",
                &[("uploads", ""), ("prefix", "jobs/x y/")]
            ),
            "https://b.s3.eu-west-1.amazonaws.com/?uploads=&prefix=jobs%2Fx%20y%2F"
        );
        // The bucket of a path-style URL as `object_store` requests it: no `/` after it.
        assert_eq!(
            request_url("http://h:9/b", "", &[("list-type", "2")]),
            "http://h:9/b?list-type=2"
        );
        assert_eq!(
            request_url("http://h/b", "a b/ü", &[]),
            "http://h/b/a%20b/%C3%BC"
        );
    }

    #[test]
    fn bucket_urls_follow_object_store() {
        assert_eq!(
            bucket_url("b", "eu-west-1", None, false),
            "https://s3.eu-west-1.amazonaws.com/b"
        );
        assert_eq!(
            bucket_url("b", "eu-west-1", None, true),
            "https://b.s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            bucket_url("b", "r", Some("http://127.0.0.1:9000/"), false),
            "http://127.0.0.1:9000/b"
        );
        assert_eq!(
            bucket_url("b", "r", Some("https://b.minio.example"), true),
            "https://b.minio.example"
        );
    }

    const OBJECTS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name>
  <Prefix>root%2F</Prefix>
  <KeyCount>3</KeyCount>
  <MaxKeys>1000</MaxKeys>
  <EncodingType>url</EncodingType>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>root%2Fshared%2F1-2-00000000000000ab.sst</Key>
    <LastModified>2026-12-07T13:09:54.250Z</LastModified>
    <ETag>&quot;x&quot;</ETag>
    <Size>1234</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>root%2Fshared%2Fa%2F%2Fb+c%2B%C3%BC</Key>
    <LastModified>1970-01-01T00:00:00.001Z</LastModified>
    <Size>0</Size>
  </Contents>
</ListBucketResult>"#;

    #[test]
    fn object_pages_decode_keys_and_give_the_next_token() {
        let page = parse_objects_page(OBJECTS.as_bytes()).unwrap();
        assert_eq!(
            page.objects,
            [
                Listed {
                    key: "root/shared/1-2-00000000000000ab.sst".into(),
                    size: 1234,
                    last_modified_ms: 1_796_648_994_250,
                },
                Listed {
                    key: "root/shared/a//b c+ü".into(),
                    size: 0,
                    last_modified_ms: 1,
                },
            ]
        );
        assert_eq!(
            page.next.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        // Without `EncodingType` keys are taken as they are.
        let plain = OBJECTS.replace("<EncodingType>url</EncodingType>", "");
        let page = parse_objects_page(plain.as_bytes()).unwrap();
        assert_eq!(page.objects[1].key, "root%2Fshared%2Fa%2F%2Fb+c%2B%C3%BC");
        let last = OBJECTS.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(parse_objects_page(last.as_bytes()).unwrap().next, None);
    }

    #[test]
    fn damaged_object_pages_are_errors_not_panics() {
        for bad in [
            OBJECTS
                .replace("<NextContinuationToken>", "<Other>")
                .replace("</NextContinuationToken>", "</Other>"),
            OBJECTS.replace("2026-12-07T13:09:54.250Z", "yesterday"),
            OBJECTS.replace("<Size>1234</Size>", "<Size>-1</Size>"),
            OBJECTS.replace("<Size>1234</Size>", ""),
            OBJECTS.replace("%C3%BC", "%C3"),
            OBJECTS.replace("%C3%BC", "%G1"),
            OBJECTS.replace("%C3%BC", "%"),
        ] {
            assert!(parse_objects_page(bad.as_bytes()).is_err(), "{bad}");
        }
        for cut in 0..OBJECTS.len() {
            let _ = parse_objects_page(&OBJECTS.as_bytes()[..cut]);
        }
    }

    #[test]
    fn keys_decode_as_form_encoding() {
        assert_eq!(decode("a%2Fb+c%2B").as_deref(), Some("a/b c+"));
        assert_eq!(decode("plain").as_deref(), Some("plain"));
        assert_eq!(decode("%e2%82%ac").as_deref(), Some("€"));
        for bad in ["%", "%4", "%+1", "%zz", "%ff", "%C3"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_parse_to_epoch_milliseconds() {
        assert_eq!(parse_time("1970-01-01T00:00:01.500Z"), Some(1_500));
        assert_eq!(
            parse_time("2010-11-10T20:48:33.000Z"),
            Some(1_289_422_113_000)
        );
        assert_eq!(
            parse_time("2010-11-10T21:48:33+01:00"),
            Some(1_289_422_113_000)
        );
        assert_eq!(parse_time("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time(""), None);
    }
}
