//! The event stream body's inputs: what goes first, merged streams and their end, a
//! stream that stays open, a task's events, and a failure answering what is owed.

use super::*;
use http_body_util::BodyExt;

/// Numbers each event's data by the input it came from; drops `"skip"`.
struct Tag;

impl Carry for Tag {
    fn carry(&mut self, from: usize, ev: sse::Event) -> Option<sse::Event> {
        let data = ev.data.clone()?;
        (data != r#""skip""#).then(|| ev.with_data(format!("[{from},{data}]")))
    }
}

fn events(text: &str) -> GateBody {
    GateBody::full(Bytes::from(text.to_string()))
}

async fn all(relay: SseRelay) -> String {
    let bytes = relay.boxed().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn merged_inputs_come_after_what_goes_first_and_end_with_the_last() {
    let input = Input::merged(vec![
        (
            3,
            events("data: 1\n\ndata: \"skip\"\n\n"),
            sse::Decoder::new(),
        ),
        (7, events("data: 2\n\n"), sse::Decoder::new()),
    ])
    .first(sse::encode_json("0", None))
    .carried(Tag);
    let out = all(SseRelay::passing(input)).await;
    assert!(out.starts_with("event: message\ndata: 0\n\n"), "{out}");
    assert!(
        out.contains("data: [3,1]\n\n") && out.contains("data: [7,2]\n\n"),
        "{out}"
    );
    assert!(!out.contains("skip"), "{out}");
}

#[tokio::test]
async fn a_stream_without_inputs_stays_open_after_what_goes_first() {
    let mut body = SseRelay::passing(Input::nothing().first(sse::encode_json("{}", None))).boxed();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"event: message\ndata: {}\n\n");
    let more = tokio::time::timeout(Duration::from_millis(100), body.frame()).await;
    assert!(more.is_err(), "still open");
}

#[tokio::test]
async fn a_tasks_events_end_when_it_does_and_it_runs_only_while_polled() {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let task = Box::pin(async move {
        for n in 0..3 {
            let _ = tx.send(sse::encode_json(&n.to_string(), None)).await;
        }
    });
    let out = all(SseRelay::passing(Input::task(task, rx))).await;
    assert_eq!(out.matches("event: message\n").count(), 3, "{out}");

    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = ran.clone();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let task = Box::pin(async move { seen.store(true, std::sync::atomic::Ordering::SeqCst) });
    drop(SseRelay::passing(Input::task(task, rx)));
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "dropped unpolled"
    );
}

#[tokio::test]
async fn a_failed_input_answers_what_is_owed_and_a_merged_one_is_only_dropped() {
    let owed: PendingIds = [RawValue::from_string("5".into()).unwrap()]
        .into_iter()
        .collect();
    let failing = || {
        let chunks: Vec<Result<Frame<Bytes>, BoxError>> = vec![
            Ok(Frame::data(Bytes::from_static(
                b"data: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n",
            ))),
            Err("cut".into()),
        ];
        GateBody::Boxed(
            http_body_util::StreamBody::new(futures_util::stream::iter(chunks)).boxed_unsync(),
        )
    };
    let timing = StreamTiming {
        keepalive: Duration::from_secs(60),
        idle: None,
    };
    let one = SseRelay::new(failing(), None, owed, "rid".into(), timing, None);
    let out = all(one).await;
    assert!(
        out.contains(r#""id":5"#) && out.contains("broke off"),
        "{out}"
    );

    let merged = Input::merged(vec![
        (0, failing(), sse::Decoder::new()),
        (
            1,
            events("data: {\"id\":5,\"result\":{}}\n\n"),
            sse::Decoder::new(),
        ),
    ]);
    let out = all(SseRelay::passing(merged)).await;
    assert!(
        out.contains(r#""result""#) && !out.contains("broke off"),
        "{out}"
    );
}
