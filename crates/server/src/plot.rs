//! Graph images for `/q`: drawn in process with `plotters` into an RGB buffer and encoded as
//! PNG. Nothing is run outside the process (OpenTSDB ran gnuplot, whose options let requests
//! reach a shell), and every option arrives here already validated as typed values.

use std::sync::OnceLock;

use chrono::TimeZone;
use hourglass_core::time::Tz;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;

/// One plotted series.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// `metric{tagk=tagv, ...}`, as OpenTSDB titles a series.
    pub label: String,
    /// Drawn against the right axis (`o=axis x1y2`).
    pub right: bool,
    /// `(ms, value)`, time-ordered.
    pub points: Vec<(i64, f64)>,
}

/// Where the legend goes (OpenTSDB's `key` words; `nokey` hides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyPlace {
    TopRight,
    TopLeft,
    BottomRight,
    BottomLeft,
}

/// An axis range from `yrange=[min:max]`: either end may be left to the data.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct AxisRange {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Everything a graph shows.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub width: u32,
    pub height: u32,
    pub start_ms: i64,
    pub end_ms: i64,
    /// Zone of the time axis labels.
    pub tz: Tz,
    pub title: Option<String>,
    pub ylabel: Option<String>,
    pub y2label: Option<String>,
    pub yrange: AxisRange,
    pub y2range: AxisRange,
    pub ylog: bool,
    pub y2log: bool,
    pub key: Option<KeyPlace>,
    /// Points without joining lines (`style=points|dots|circles`).
    pub points_only: bool,
    pub background: RGBColor,
    pub foreground: RGBColor,
    pub lines: Vec<Line>,
    /// Annotations: (ms, description), drawn as vertical markers.
    pub notes: Vec<(i64, String)>,
}

const FONT: &str = "sans-serif";

fn font_ready() -> Result<(), String> {
    static READY: OnceLock<bool> = OnceLock::new();
    let ok = *READY
        .get_or_init(|| register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok {
        Ok(())
    } else {
        Err("the built-in font could not be loaded".into())
    }
}

/// The x axis label format for a time span, as OpenTSDB chose it.
fn time_format(span_secs: i64) -> &'static str {
    match span_secs {
        s if s < 2_100 => "%H:%M:%S",
        s if s < 86_400 => "%H:%M",
        s if s < 604_800 => "%a %H:%M",
        s if s < 1_209_600 => "%a %d %H:%M",
        s if s < 7_776_000 => "%b %d",
        _ => "%Y/%m/%d",
    }
}

/// An axis value in few characters (gnuplot's `% g` look).
fn value_label(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e7).contains(&a) {
        return format!("{v:.2e}");
    }
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// Bounds of one axis: data extent (log10 on log axes) widened by the requested range.
fn axis_bounds<'a>(
    lines: impl Iterator<Item = &'a Line>,
    log: bool,
    range: AxisRange,
) -> (f64, f64) {
    let scale = |v: f64| if log { v.log10() } else { v };
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in lines.flat_map(|l| l.points.iter().map(|p| p.1)) {
        if v.is_finite() && (!log || v > 0.0) {
            lo = lo.min(scale(v));
            hi = hi.max(scale(v));
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, if log { 1.0 } else { 10.0 });
    }
    if let Some(min) = range.min.filter(|m| m.is_finite() && (!log || *m > 0.0)) {
        lo = scale(min);
    }
    if let Some(max) = range.max.filter(|m| m.is_finite() && (!log || *m > 0.0)) {
        hi = scale(max);
    }
    if hi <= lo {
        // A flat line (or a range given backwards) still needs an axis.
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - pad, lo + pad);
    }
    let pad = (hi - lo) * 0.05;
    (
        if range.min.is_some() { lo } else { lo - pad },
        if range.max.is_some() { hi } else { hi + pad },
    )
}

/// The points of a line in axis space (log10 on a log axis; gaps for what cannot be shown).
fn plotted(line: &Line, log: bool) -> Vec<(i64, f64)> {
    line.points
        .iter()
        .filter(|(_, v)| v.is_finite() && (!log || *v > 0.0))
        .map(|&(t, v)| (t, if log { v.log10() } else { v }))
        .collect()
}

/// Renders the chart as a PNG file's bytes.
pub(crate) fn render_png(chart: &Chart) -> Result<Vec<u8>, String> {
    font_ready()?;
    let (w, h) = (chart.width, chart.height);
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, chart).map_err(|e| format!("drawing failed: {e}"))?;
        root.present().map_err(|e| format!("drawing failed: {e}"))?;
    }
    let mut out = Vec::with_capacity(rgb.len() / 8);
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(root: &DrawingArea<BitMapBackend<'_>, Shift>, c: &Chart) -> DrawResult {
    root.fill(&c.background)?;
    let fg = c.foreground;
    let text = |size: u32| (FONT, size).into_font().color(&fg);
    let has_right = c.lines.iter().any(|l| l.right);
    let (ylo, yhi) = axis_bounds(c.lines.iter().filter(|l| !l.right), c.ylog, c.yrange);
    let (y2lo, y2hi) = axis_bounds(c.lines.iter().filter(|l| l.right), c.y2log, c.y2range);
    let (start, end) = (c.start_ms, c.end_ms.max(c.start_ms + 1));

    let mut builder = ChartBuilder::on(root);
    builder
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .right_y_label_area_size(if has_right { 64 } else { 0 });
    if let Some(title) = &c.title {
        builder.caption(title, text(16));
    }
    let mut chart = builder
        .build_cartesian_2d(start..end, ylo..yhi)?
        .set_secondary_coord(start..end, y2lo..y2hi);

    let format = time_format((end - start) / 1000);
    let tz = c.tz;
    let time_label = move |ms: &i64| {
        tz.timestamp_millis_opt(*ms)
            .single()
            .map(|t| t.format(format).to_string())
            .unwrap_or_default()
    };
    let left_log = c.ylog;
    let left_label = move |v: &f64| value_label(if left_log { 10f64.powf(*v) } else { *v });
    let grid = fg.mix(0.12);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(8)
        .y_labels(8)
        .x_label_formatter(&time_label)
        .y_label_formatter(&left_label)
        .label_style(text(11))
        .axis_style(fg)
        .bold_line_style(grid)
        .light_line_style(TRANSPARENT);
    if let Some(label) = &c.ylabel {
        mesh.y_desc(label).axis_desc_style(text(12));
    }
    mesh.draw()?;
    if has_right {
        let right_log = c.y2log;
        let right_label = move |v: &f64| value_label(if right_log { 10f64.powf(*v) } else { *v });
        let mut axes = chart.configure_secondary_axes();
        axes.y_labels(8)
            .y_label_formatter(&right_label)
            .label_style(text(11))
            .axis_style(fg);
        if let Some(label) = &c.y2label {
            axes.y_desc(label).axis_desc_style(text(12));
        }
        axes.draw()?;
    }

    if c.lines.is_empty() {
        let (w, h) = root.dim_in_pixel();
        root.draw(&Text::new(
            "No data",
            (w as i32 / 2 - 30, h as i32 / 10),
            text(14),
        ))?;
    }

    for (i, line) in c.lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts = plotted(line, if line.right { c.y2log } else { c.ylog });
        let marker = |p: (i64, f64)| Circle::new(p, 2, color.filled());
        let legend = move |(x, y): (i32, i32)| {
            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
        };
        let label = line.label.clone();
        if line.right {
            if !c.points_only {
                chart.draw_secondary_series(LineSeries::new(pts.iter().copied(), color))?;
            }
            chart
                .draw_secondary_series(pts.iter().copied().map(marker))?
                .label(label)
                .legend(legend);
        } else {
            if !c.points_only {
                chart.draw_series(LineSeries::new(pts.iter().copied(), color))?;
            }
            chart
                .draw_series(pts.iter().copied().map(marker))?
                .label(label)
                .legend(legend);
        }
    }

    let note_style = RGBColor(0x6e, 0x40, 0xc9);
    for (t, description) in c.notes.iter().filter(|(t, _)| (start..=end).contains(t)) {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*t, ylo), (*t, yhi)],
            note_style.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            description.clone(),
            (*t, ylo + (yhi - ylo) * 0.02),
            (FONT, 11).into_font().color(&note_style),
        )))?;
    }

    if let (Some(place), false) = (c.key, c.lines.is_empty()) {
        let position = match place {
            KeyPlace::TopRight => SeriesLabelPosition::UpperRight,
            KeyPlace::TopLeft => SeriesLabelPosition::UpperLeft,
            KeyPlace::BottomRight => SeriesLabelPosition::LowerRight,
            KeyPlace::BottomLeft => SeriesLabelPosition::LowerLeft,
        };
        chart
            .configure_series_labels()
            .position(position)
            .label_font(text(11))
            .background_style(c.background.mix(0.85))
            .border_style(fg)
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(lines: Vec<Line>) -> Chart {
        Chart {
            width: 320,
            height: 200,
            start_ms: 1_356_998_400_000,
            end_ms: 1_357_002_000_000,
            tz: Tz::UTC,
            title: Some("cpu".into()),
            ylabel: Some("percent".into()),
            y2label: None,
            yrange: AxisRange::default(),
            y2range: AxisRange::default(),
            ylog: false,
            y2log: false,
            key: Some(KeyPlace::TopRight),
            points_only: false,
            background: WHITE,
            foreground: BLACK,
            lines,
            notes: vec![(1_356_999_000_000, "deploy".into())],
        }
    }

    fn decoded(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("png frame");
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn a_chart_is_a_png_of_the_requested_size_with_its_series_drawn() {
        let line = Line {
            label: "sys.cpu.user{host=web01}".into(),
            right: false,
            points: (0..120)
                .map(|i| (1_356_998_400_000 + i * 30_000, (i % 7) as f64))
                .collect(),
        };
        let bytes = render_png(&chart(vec![line])).expect("rendered");
        let (w, h, rgb) = decoded(&bytes);
        assert_eq!((w, h), (320, 200));
        // The first series' colour appears: the line was drawn.
        let (r, g, b) = Palette99::pick(0).to_rgba().rgb();
        let drawn = rgb.chunks(3).filter(|p| *p == [r, g, b]).count();
        assert!(drawn > 100, "only {drawn} pixels of the series colour");
    }

    #[test]
    fn empty_log_and_flat_charts_render() {
        let mut c = chart(vec![]);
        c.ylog = true;
        assert!(render_png(&c).is_ok());
        let flat = Line {
            label: "x{}".into(),
            right: true,
            points: vec![(1_356_998_400_000, 5.0), (1_356_998_460_000, 5.0)],
        };
        let mut c = chart(vec![flat]);
        c.y2log = true;
        c.yrange = AxisRange {
            min: Some(3.0),
            max: Some(1.0),
        };
        assert!(render_png(&c).is_ok());
    }

    #[test]
    fn axis_bounds_follow_data_and_requests() {
        let line = Line {
            label: String::new(),
            right: false,
            points: vec![(0, 1.0), (1, 100.0), (2, f64::NAN)],
        };
        let (lo, hi) = axis_bounds(std::iter::once(&line), true, AxisRange::default());
        assert!(lo < 0.0 && hi > 2.0, "{lo} {hi}");
        let fixed = AxisRange {
            min: Some(0.0),
            max: Some(50.0),
        };
        assert_eq!(
            axis_bounds(std::iter::once(&line), false, fixed),
            (0.0, 50.0)
        );
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(value_label(12.5), "12.5");
        assert_eq!(value_label(3.0), "3");
        assert_eq!(value_label(0.0), "0");
        assert_eq!(value_label(12_345_678.0), "1.23e7");
        assert_eq!(time_format(3_600), "%H:%M");
        assert_eq!(time_format(30 * 86_400), "%b %d");
    }
}
