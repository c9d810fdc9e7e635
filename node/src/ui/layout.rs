//! The frame every page shares: head, navigation, style and the optional
//! auto-refresh script. Pages work without JavaScript; the script only
//! reloads the page on a timer the reader switches on.

use maud::{html, Markup, PreEscaped, DOCTYPE};

/// The pages, in navigation order: (which, path, title).
pub const PAGES: &[(Page, &str, &str)] = &[
    (Page::Queue, "/ui/queue", "Queue"),
    (Page::Hosts, "/ui/hosts", "Hosts"),
    (Page::Cluster, "/ui/cluster", "Cluster"),
    (Page::FairShare, "/ui/fairshare", "Fair share and quotas"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Queue,
    Job,
    Hosts,
    Cluster,
    FairShare,
    Error,
}

/// Seconds between reloads when auto-refresh is on.
pub const REFRESH_INTERVAL_S: u32 = 10;

/// Dark text on white and a blue link colour with a contrast ratio above
/// 7:1 (WCAG AAA); state colours are always paired with the state's name.
const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;background:#fff;margin:0;line-height:1.45;font-size:15px}
header{background:#1f2a44;color:#fff;padding:.6rem 1.5rem;display:flex;flex-wrap:wrap;align-items:center;gap:1.5rem}
header a{color:#fff}
header .brand{font-weight:700;font-size:1.1rem;text-decoration:none}
nav ul{list-style:none;display:flex;gap:1.2rem;margin:0;padding:0}
nav a[aria-current=page]{font-weight:700;text-decoration-thickness:3px}
main{max-width:1400px;margin:0 auto;padding:1rem 1.5rem 3rem}
a{color:#0b4ea2}
h1{font-size:1.5rem;margin:.6rem 0 1rem}
h2{font-size:1.15rem;margin:1.6rem 0 .5rem}
table{border-collapse:collapse;width:100%;margin:.4rem 0 1rem;font-size:.92rem}
th,td{border-bottom:1px solid #c8ccd4;padding:.35rem .5rem;text-align:left;vertical-align:top}
thead th{background:#eef1f6;border-bottom:2px solid #5a6372}
tbody th{font-weight:600;white-space:nowrap}
td.num .note{white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;padding:.2rem 0}
table.compact{width:auto}
table.compact th,table.compact td{padding-right:1.2rem}
.nowrap{white-space:nowrap}
td.reason{min-width:12rem}
.scroll{overflow-x:auto}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1.2rem;margin:.4rem 0 1rem}
dl.facts dt{font-weight:600}
dl.facts dd{margin:0}
form.filters{display:flex;flex-wrap:wrap;gap:.8rem 1.2rem;align-items:flex-end;background:#f5f7fa;border:1px solid #c8ccd4;padding:.7rem 1rem;margin-bottom:1rem}
form.filters label{display:flex;flex-direction:column;font-size:.85rem;font-weight:600;gap:.2rem}
input,select,button{font:inherit;padding:.25rem .4rem;border:1px solid #5a6372;border-radius:3px;background:#fff;color:#1a1a1a}
button{background:#1f2a44;color:#fff;border-color:#1f2a44;cursor:pointer}
.state{font-weight:600;padding:0 .3rem;border-radius:3px;white-space:nowrap}
.state-PENDING{background:#fff4d6;color:#5c4200}
.state-RUNNING{background:#dcf3e3;color:#0d4a22}
.state-FAILED,.state-NODE_FAIL,.state-TIMEOUT,.state-drain,.state-down{background:#fde2e1;color:#7a1410}
.state-idle{background:#e4ecfb;color:#123a7a}
.state-mixed,.state-allocated{background:#dcf3e3;color:#0d4a22}
.why{border-left:4px solid #b7791f;background:#fffaf0;padding:.6rem 1rem;margin:.6rem 0 1rem}
.why p{margin:.2rem 0}
.note{color:#454c59;font-size:.9rem}
pre{background:#f5f7fa;border:1px solid #c8ccd4;padding:.5rem;white-space:pre-wrap;word-break:break-all;margin:0}
.refresh{margin-left:auto;font-size:.9rem}
.refresh label{display:flex;gap:.4rem;align-items:center}
"#;

/// Reloads the page every REFRESH_INTERVAL_S seconds while the box is
/// ticked; the choice is kept in localStorage across pages. The control is
/// hidden until this runs, so a reader without JavaScript never sees a
/// switch that does nothing.
const SCRIPT: &str = r#"
(function(){
  var box=document.getElementById('auto-refresh');
  if(!box){return;}
  box.parentNode.parentNode.hidden=false;
  var key='berth-ui-auto-refresh',timer=null,every=box.dataset.seconds*1000;
  function arm(){clearTimeout(timer);if(box.checked){timer=setTimeout(function(){location.reload();},every);}}
  try{box.checked=localStorage.getItem(key)==='on';}catch(e){}
  box.addEventListener('change',function(){try{localStorage.setItem(key,box.checked?'on':'off');}catch(e){}arm();});
  arm();
})();
"#;

/// A whole page: `title` in the head and as the h1, `body` under it.
/// `viewer` says who the page was rendered for (shown in the header).
pub fn page(current: Page, title: &str, viewer: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " \u{2014} Berth" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a.brand href="/ui/" { "Berth" }
                    nav aria-label="Pages" {
                        ul {
                            @for (which, path, name) in PAGES {
                                li {
                                    @if *which == current {
                                        a href=(path) aria-current="page" { (name) }
                                    } @else {
                                        a href=(path) { (name) }
                                    }
                                }
                            }
                        }
                    }
                    div.refresh hidden {
                        label {
                            input #auto-refresh type="checkbox" data-seconds=(REFRESH_INTERVAL_S);
                            "Auto-refresh every " (REFRESH_INTERVAL_S) " s"
                        }
                    }
                    span.viewer { "Signed in as " (viewer) }
                }
                main {
                    h1 { (title) }
                    (body)
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

/// A state as a labelled badge (the colour only repeats the word).
pub fn state_badge(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } { (state) } }
}
