#![allow(missing_docs)]
use sim::game::{Order, UnitKind};
use sim::scenarios;
fn main() {
    let mut w = scenarios::skirmish(3);
    let mut bots = scenarios::bots(&w, 3, 200);
    scenarios::play(&mut w, &mut bots, sim::Turn(0), 1000, |t, inputs, w| {
        if t.0 % 100 == 99 {
            let mut idle = 0; let mut gath = 0; let mut ret = 0; let mut other = 0;
            for e in w.entities() { if e.kind == UnitKind::Worker { match e.order { Order::Idle => idle += 1, Order::Gather{returning: false, ..} => gath += 1, Order::Gather{..} => ret += 1, _ => other += 1 } } }
            let army_idle = w.entities().iter().filter(|e| e.kind.is_army() && e.order == Order::Idle).count();
            println!("t{t} idle {idle} gath {gath} ret {ret} other {other} army_idle {army_idle} inputs {} players {:?}", inputs.len(), w.players());
        }
    });
    let mines: Vec<_> = w.entities().iter().filter(|e| e.kind == UnitKind::Mine).map(|e| (e.id, e.cargo, e.pos.tile())).collect();
    println!("{mines:?}");
    for e in w.entities().iter().filter(|e| e.kind == UnitKind::Worker).take(6) { println!("{:?} {:?} timer {} cargo {}", e.pos.tile(), e.order, e.timer, e.cargo); }
    for e in w.entities().iter().filter(|e| e.kind == UnitKind::Base) { println!("base {:?} {:?}", e.pos.tile(), e.owner); }
}
